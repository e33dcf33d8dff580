"""Every "§" reference in the repository points to a section that exists in the repository.

Code, docs and reports cite sections as ``SPEC §7`` or ``docs/theory.md §5``. The files scanned:
``src/`` (.py, .js, .css, .html), ``docs/`` (.md; the recorded examples under ``docs/examples/``
also as .json, .html and .py, since their text comes from the code's strings), ``README.md``,
``requirements.txt``, ``pyproject.toml``, ``Makefile``, ``benchmarks/``, ``scripts/``, ``examples/``
and ``tests/`` — never a virtual environment or a cache. The rules:

* ``SPEC §N`` or ``SPEC §N.M`` resolves to a heading numbered N (or N.M) in docs/science.md, the
  specification. A range ``SPEC §8–9`` needs both ends. "SPEC" may end one line and "§N" begin the
  next (a wrapped docstring).
* An experiment id after the section — ``SPEC §8 F3``, ``§8 F1/F2b``, ``§8 F1–F3``, ``§8 row C``,
  ``§8 D (App. D)`` — must be defined in that section of docs/science.md: the first cell of a table
  row, or the start of a heading.
* A quoted name right after the section (``SPEC §3 "Fourier view"``) must occur in that section.
* ``docs/<file>.md §N`` and ``<file>.md §N`` resolve to a heading numbered N in that file (looked
  up next to the citing file, then in docs/, then at the top level).
* A bare ``§N`` that continues a list or a clause begun by a qualified reference in the same
  sentence (``SPEC §6.4, §7``, ``SPEC §5 and §6.3``, ``SPEC §8 (§6.2)``: at most 60 characters on,
  no sentence end, blank line or table-cell border between) has that reference's target.
* Any other bare ``§N`` inside a markdown document resolves to that document's own numbered
  headings; anywhere else (code, a markdown file without numbered headings) it is ambiguous and
  reported: write ``SPEC §N`` or name the document.

Every unresolved reference is reported at once, as ``file:line: reference (why)``.
"""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from repo_paths import ROOT

SPECIFICATION = "docs/science.md"

#: Folder -> suffixes of the files scanned in it (recursively).
SCANNED = {
    "src": (".py", ".js", ".css", ".html"),
    "docs": (".md", ".json", ".html", ".py"),
    "benchmarks": (".py", ".md"),
    "scripts": (".py",),
    "examples": (".py",),
    "tests": (".py",),
}
TOP_LEVEL = ("README.md", "requirements.txt", "pyproject.toml", "Makefile")
#: Outside docs/examples only markdown is documentation; JSON and HTML there are recorded outputs.
RECORDED_OUTPUTS = "docs/examples"
SKIPPED_FOLDERS = {".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules"}

NUMBER = r"\d+(?:\.\d+)*"
SECTION = re.compile(rf"§ ?(?P<number>{NUMBER})(?:[–-](?P<last>{NUMBER}))?")
EXPERIMENT = r"(?:F\d+[ab]?|S\d+|C|D)(?![\w'’])"
ONE_EXPERIMENT = rf"(?:row\s+|App\.\s*)?{EXPERIMENT}"
EXPERIMENTS = rf"{ONE_EXPERIMENT}(?:\s*[,/–-]\s*{ONE_EXPERIMENT})*"
#: After the section number: ``F3``, ``F1/F2b``, ``F1–F3``, ``row C, App. C``, ``(F2a, F5b)``, ``D (App. D)``.
EXPERIMENT_LIST = re.compile(rf"\s*\(\s*{EXPERIMENTS}\s*\)|\s+{EXPERIMENTS}(?:\s*\(\s*{EXPERIMENTS}\s*\))?")
SINGLE_EXPERIMENT = re.compile(EXPERIMENT)
QUOTED_NAME = re.compile(r"['’]?s?[ ,:;]*[\"“](?P<name>[A-Za-z][^\"”\n]{0,60})[\"”]")
SPEC_BEFORE = re.compile(r"\bSPEC(?:\s|#|\*|//)*$")
DOCUMENT_BEFORE = re.compile(r"(?P<document>(?:[\w.-]+/)*[\w.-]+\.md)`?\s*$")
#: What may separate a bare § from the qualified reference it continues: one clause, no sentence end.
CONTINUATION = re.compile(r"[^|]{0,60}")
SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n\s*\n")
HEADING = re.compile(rf"^(?P<level>#{{1,6}})\s+(?P<number>{NUMBER})\.?\s")
FENCE = re.compile(r"^\s*(```|~~~)")


def numbered_sections(markdown: str) -> dict[str, str]:
    """Section number -> the text of that section (its heading to the next heading of the same or a
    higher level), for every heading of ``markdown`` that starts with a number; fenced code is not
    read for headings."""
    headings, fenced = [], False
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            match = HEADING.match(line)
            headings.append((index, len(line) - len(line.lstrip("#")), match and match["number"]))
    sections = {}
    for position, (start, level, number) in enumerate(headings):
        if number is None:
            continue
        end = next((i for i, lvl, _ in headings[position + 1:] if lvl <= level), len(lines))
        sections[number] = "\n".join(lines[start:end])
    return sections


@dataclass
class Documents:
    """The markdown documents a reference may point to, read once each from ``root``."""

    root: Path
    read: dict[str, dict[str, str] | None] = field(default_factory=dict, repr=False)

    def sections(self, relative: str) -> dict[str, str] | None:
        """Numbered sections of the markdown file at ``relative`` (None when there is no such file)."""
        if relative not in self.read:
            path = self.root / relative
            self.read[relative] = numbered_sections(path.read_text()) if path.is_file() else None
        return self.read[relative]

    def locate(self, name: str, citing: str) -> str:
        """The relative path that a document name written in ``citing`` means."""
        if "/" in name:
            return name
        for folder in (str(Path(citing).parent), "docs", "."):
            candidate = str(Path(folder) / name)
            if (self.root / candidate).is_file():
                return candidate
        return name


@dataclass
class Reference:
    """One § reference: where it is, what it says, and the document and sections it points to."""

    line: int
    text: str
    target: str | None  # None: a bare § that no document claims
    numbers: tuple[str, ...]  # two for a range
    experiments: tuple[str, ...]
    name: str | None
    end: int  # offset just past the reference, where a continuing bare § is looked for


def _normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).lower()


def find_references(text: str, citing: str, documents: Documents) -> list[Reference]:
    """Every § reference in ``text`` (the content of the file at relative path ``citing``), with the
    document it points to after the qualifier, continuation and bare-reference rules."""
    found: list[Reference] = []
    own = citing if citing.endswith(".md") else None
    for match in SECTION.finditer(text):
        before = text[max(0, match.start() - 160):match.start()]
        if SPEC_BEFORE.search(before):
            target = SPECIFICATION
        elif document := DOCUMENT_BEFORE.search(before):
            target = documents.locate(document["document"], citing)
        elif found and _continues(text[found[-1].end:match.start()]):
            target = found[-1].target
        else:
            target = own
        end = match.end()
        experiments: tuple[str, ...] = ()
        if listed := EXPERIMENT_LIST.match(text, end):
            experiments = tuple(SINGLE_EXPERIMENT.findall(re.sub(r"App\.|row", " ", listed.group())))
            end = listed.end()
        name = None
        if quoted := QUOTED_NAME.match(text, end):
            name, end = quoted["name"], quoted.end()
        numbers = (match["number"],) + ((match["last"],) if match["last"] else ())
        found.append(Reference(line=text.count("\n", 0, match.start()) + 1, text=text[match.start():end].strip(),
                               target=target, numbers=numbers, experiments=experiments, name=name, end=end))
    return found


def _continues(gap: str) -> bool:
    return CONTINUATION.fullmatch(gap) is not None and not SENTENCE_END.search(gap)


def _experiment_ids(section: str) -> set[str]:
    cells = re.findall(rf"^\|\s*({EXPERIMENT})\s*\|", section, flags=re.M)
    headings = re.findall(rf"^#+\s+(?:{NUMBER}\.?\s+)?({EXPERIMENT})", section, flags=re.M)
    return set(cells) | set(headings)


def problems(reference: Reference, citing: str, documents: Documents) -> list[str]:
    """Why ``reference`` does not resolve (empty when it does)."""
    if reference.target is None:
        return ["bare § outside a markdown document: write SPEC §N or name the document"]
    sections = documents.sections(reference.target)
    if sections is None:
        return [f"{reference.target} does not exist"]
    if not sections:
        where = "this document" if reference.target == citing else reference.target
        return [f"{where} has no numbered headings: write SPEC §N or name the document"]
    missing = [n for n in reference.numbers if n not in sections]
    if missing:
        return [f"{reference.target} has no section {', '.join(missing)}"]
    section = sections[reference.numbers[0]]
    found = []
    if undefined := [e for e in reference.experiments if e not in _experiment_ids(section)]:
        found.append(f"no experiment {', '.join(undefined)} in {reference.target} §{reference.numbers[0]}")
    if reference.name and _normalised(reference.name) not in _normalised(section):
        found.append(f'"{reference.name}" does not occur in {reference.target} §{reference.numbers[0]}')
    return found


def unresolved(text: str, citing: str, documents: Documents) -> list[str]:
    """``file:line: reference (why)`` for every reference in ``text`` that does not resolve."""
    return [f"{citing}:{ref.line}: {ref.text} ({why})"
            for ref in find_references(text, citing, documents) for why in problems(ref, citing, documents)]


def scanned_files(root: Path = ROOT) -> list[Path]:
    """Every file whose references are checked."""
    files = [root / name for name in TOP_LEVEL if (root / name).is_file()]
    for folder, suffixes in SCANNED.items():
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if SKIPPED_FOLDERS & set(relative.parts) or any(p.endswith(".egg-info") for p in relative.parts):
                continue
            outside_outputs = not relative.as_posix().startswith(RECORDED_OUTPUTS)
            if folder == "docs" and outside_outputs and path.suffix != ".md":
                continue
            if path.is_file() and path.suffix in suffixes:
                files.append(path)
    return files


def readable_text(path: Path) -> str:
    """The file's text with § written out where the format escapes it (JSON, HTML entities)."""
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        text = text.replace("\\u00a7", "§")
    if path.suffix == ".html":
        text = text.replace("&sect;", "§").replace("&#167;", "§")
    return text


def references_in_repository(root: Path = ROOT) -> tuple[int, list[str]]:
    """How many § references the repository holds, and every one that does not resolve."""
    documents, count, found = Documents(root), 0, []
    for path in scanned_files(root):
        text = readable_text(path)
        if "§" in text:
            citing = path.relative_to(root).as_posix()
            count += len(find_references(text, citing, documents))
            found += unresolved(text, citing, documents)
    return count, found


def test_every_reference_resolves():
    assert Documents(ROOT).sections(SPECIFICATION), f"{SPECIFICATION} is missing or has no numbered sections"
    count, found = references_in_repository()
    assert count > 500, f"only {count} § references found: is the scan reading the repository?"
    assert not found, f"{len(found)} unresolved § references:\n" + "\n".join(found)


def test_the_specification_has_every_section_and_experiment():
    sections = Documents(ROOT).sections(SPECIFICATION)
    expected = [str(n) for n in range(1, 12)] + ["6.1", "6.2", "6.3", "6.4"]
    assert [n for n in expected if n not in sections] == []
    ids = {"F1", "F2a", "F2b", "F3", "F4", "F5a", "F5b", "F7", "F8a", "F8b", "F9", "S72", "C", "D"}
    assert ids - _experiment_ids(sections["8"]) == set()


# The made-up texts below write § as an escape, so that the scan of this file does not read them.
SECTION_SIGN = "\u00a7"


def made_up_repository(root: Path) -> Documents:
    """A specification with sections 3, 6.4, 7 and 8 (experiments F3 and C), a document with a
    section 5, and one without numbered headings."""
    (root / "docs").mkdir()
    (root / SPECIFICATION).write_text("# Spec\n## 3. Similarity\nThe Fourier view.\n## 6. Theory\n### 6.4 Decoder\n"
                                      "## 7. Language models\n## 8. Experiments\n| id |\n|---|\n| F3 |\n| C |\n")
    (root / "docs" / "theory.md").write_text("# Theory\n## 5. Late regime\n```\n# 9. not a heading\n```\n")
    (root / "docs" / "monitor.md").write_text("# Monitor\n## The monitor\n")
    return Documents(root)


def reported_references(text: str, citing: str, documents: Documents) -> list[str]:
    """The reference part of each line :func:`unresolved` reports for ``text``."""
    return [line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in unresolved(text, citing, documents)]


def test_the_resolver_reports_what_does_not_exist(tmp_path):
    documents = made_up_repository(tmp_path)
    s = SECTION_SIGN
    fine = (f"SPEC {s}8 F3, SPEC {s}6.4, {s}7 and {s}3, SPEC\n    {s}7, docs/theory.md {s}5, theory.md {s}5, "
            f'SPEC {s}3 "Fourier view", SPEC {s}8 row C (App. C), SPEC {s}7–8, SPEC {s}3 "no name\n')
    assert unresolved(fine, "src/ctxstair/made_up.py", documents) == []
    broken = (f'Broken: SPEC {s}12, docs/theory.md {s}99, SPEC {s}8 F42, SPEC {s}3 "no such name", SPEC {s}6.5.\n'
              f"A bare {s}4 in code. nowhere.md {s}1, docs/monitor.md {s}2, SPEC {s}8 F3/D, theory.md {s}9.\n")
    assert reported_references(broken, "src/ctxstair/made_up.py", documents) == [
        f"{s}12", f"{s}99", f"{s}8 F42", f'{s}3 "no such name"', f"{s}6.5", f"{s}4", f"{s}1", f"{s}2", f"{s}8 F3/D",
        f"{s}9"]
    assert unresolved(broken, "src/ctxstair/made_up.py", documents)[5].startswith("src/ctxstair/made_up.py:2: ")


def test_a_bare_reference_in_markdown_reads_its_own_headings(tmp_path):
    documents = made_up_repository(tmp_path)
    s = SECTION_SIGN
    assert unresolved(f"As {s}5 shows.", "docs/theory.md", documents) == []
    assert reported_references(f"As {s}9 shows.", "docs/theory.md", documents) == [f"{s}9"]
    assert reported_references(f"As {s}5 shows.", "docs/monitor.md", documents) == [f"{s}5"]
    assert reported_references(f"As {s}5 shows.", "README.md", documents) == [f"{s}5"]


def test_the_scan_reads_recorded_outputs_and_skips_environments(tmp_path):
    made_up_repository(tmp_path)
    (tmp_path / "docs" / "examples").mkdir()
    (tmp_path / "docs" / "examples" / "summary.json").write_text(json.dumps({"expected": f"SPEC {SECTION_SIGN}12"}))
    (tmp_path / "docs" / "examples" / "report.html").write_text("<p>SPEC &sect;3</p>")
    (tmp_path / "src" / ".venv").mkdir(parents=True)
    (tmp_path / "src" / ".venv" / "site.py").write_text(f"# {SECTION_SIGN}99")
    count, found = references_in_repository(tmp_path)
    assert count == 2
    assert found == [f"docs/examples/summary.json:1: {SECTION_SIGN}12 (docs/science.md has no section 12)"]

"""examples/tutorial.ipynb runs from top to bottom on the CPU: every cell, in a fresh kernel, with
no error. The notebook is stored without outputs (they would go stale and bloat diffs), so this
test is what shows that it works."""

import os

import nbformat
import pytest
from nbclient import NotebookClient
from repo_paths import ROOT

NOTEBOOK = ROOT / "examples" / "tutorial.ipynb"


def test_the_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.extended  # every cell in a fresh kernel: ≈ 25 s on 2 cores
def test_the_tutorial_notebook_runs(tmp_path, monkeypatch):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TMPDIR", str(tmp_path))      # the notebook's outputs go to a temporary folder
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()   # raises CellExecutionError, naming the cell, when a cell fails
    printed = "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for output in cell.outputs)
    assert "rho_next =" in printed and "step  40" in printed
    assert os.listdir(tmp_path)

"""The built-in synthetic corpus (SPEC §7): :func:`synthetic_corpus` generates text from a small
probabilistic grammar whose next-token statistics carry known structure, :data:`SYNTHETIC_GROUPS`
(numbers in order, weekdays and months on a cycle, four categories). It is the default corpus of
demos and tests: nothing to download, the same text for the same seed.

Example::

    text = synthetic_corpus()                     # 0.63 MB, 20,000 sentences, instant
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from ctxstair.errors import InputError


@dataclass(frozen=True)
class WordGroup:
    """Words with a known structure: ``ordered`` (a path in the listed order), ``cyclic`` (a cycle
    in the listed order, last word next to the first) or ``category`` (one cluster)."""

    words: tuple[str, ...]
    kind: Literal["ordered", "cyclic", "category"]


#: The structure built into :func:`synthetic_corpus`; also the default groups of
#: :func:`ctxstair.semantics.structure.group_structure` on real text.
SYNTHETIC_GROUPS: dict[str, WordGroup] = {
    "numbers": WordGroup(("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                          "eighteen", "nineteen", "twenty"), "ordered"),
    "weekdays": WordGroup(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"), "cyclic"),
    "months": WordGroup(("january", "february", "march", "april", "may", "june", "july", "august",
                         "september", "october", "november", "december"), "cyclic"),
    "colours": WordGroup(("red", "blue", "green", "yellow", "black", "white", "purple"), "category"),
    "family": WordGroup(("mother", "father", "sister", "brother", "son", "daughter", "uncle", "aunt"), "category"),
    "countries": WordGroup(("france", "spain", "italy", "germany", "japan", "china", "brazil", "canada"), "category"),
    "languages": WordGroup(("python", "java", "rust", "ruby", "perl", "haskell", "fortran", "kotlin"), "category"),
}

# What follows a category word (its first word is the next token). Each category has its own
# followers, and each word draws its own preferences over them (see _Grammar), so a category is a
# cluster with some spread inside.
_FOLLOWERS = {
    "colours": ("car", "house", "shirt", "door", "ball", "flower", "hat", "bike"),
    "family": ("said", "called", "smiled", "cooked", "laughed", "came", "waited"),
    "countries": ("last year", "for work", "with friends", "twice", "again"),
    "languages": ("code", "programs", "scripts", "libraries", "tools"),
}
_UNITS = ("seconds", "minutes", "hours", "days", "weeks", "months", "years")
_SUBJECTS = ("the man", "the woman", "the dog", "a child", "we", "they", "i", "she", "he", "the teacher")
_VERBS = ("saw", "liked", "found", "wanted", "made", "carried", "lost", "cleaned")
_OBJECTS = ("a book", "the ball", "the garden", "some bread", "the city", "a letter", "the window", "a box")
_ADJECTIVES = ("nice", "good", "quiet", "busy", "cold", "warm", "long", "short")


class _Grammar:
    """The sentence templates of :func:`synthetic_corpus`; every choice comes from one seeded RNG."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        # Dirichlet(1) preferences of each category word over its category's followers.
        self.preferences = {
            word: [self.rng.gammavariate(1.0, 1.0) for _ in _FOLLOWERS[group]]
            for group in _FOLLOWERS for word in SYNTHETIC_GROUPS[group].words
        }
        self.templates = [(self.counting, 3), (self.arithmetic, 2), (self.quantity, 2), (self.weekdays, 3),
                          (self.months, 3), (self.colours, 2), (self.family, 2), (self.countries, 2),
                          (self.languages, 2), (self.filler, 4)]

    def sentence(self) -> str:
        templates, weights = zip(*self.templates)
        return self.rng.choices(templates, weights)[0]() + " ."

    def follower(self, group: str, word: str) -> str:
        return self.rng.choices(_FOLLOWERS[group], self.preferences[word])[0]

    def run(self, words: tuple[str, ...], cyclic: bool) -> list[str]:
        """A run of 2–6 words in listed order (or backwards) with a step of 1, 2 or 3.

        Steps larger than one make the successor distribution of a word spread over its next few
        neighbours, so next-token signatures of nearby words overlap and those of far words do not:
        the order becomes visible as a smooth path (or cycle) rather than isolated points.
        """
        rng = self.rng
        step = rng.choices((1, 2, 3), (6, 3, 1))[0] * (1 if rng.random() < 0.8 else -1)
        length = rng.randint(2, 6)
        n = len(words)
        if cyclic:
            start = rng.randrange(n)
            return [words[(start + i * step) % n] for i in range(length)]
        length = min(length, (n - 1) // abs(step) + 1)
        start = rng.randrange(n - (length - 1) * abs(step))
        indices = [start + i * abs(step) for i in range(length)]
        return [words[i] for i in (indices if step > 0 else indices[::-1])]

    def listing(self, words: tuple[str, ...]) -> str:
        """``a b c and d`` for a run of cyclic words."""
        run = self.run(words, cyclic=True)
        return " ".join(run[:-1]) + " and " + run[-1]

    def counting(self) -> str:
        numbers = SYNTHETIC_GROUPS["numbers"].words
        who = self.rng.choice(("we count", "she counted", "count", "the kids counted", "he counts"))
        return who + " " + " ".join(self.run(numbers, cyclic=False))

    def arithmetic(self) -> str:
        numbers, rng = SYNTHETIC_GROUPS["numbers"].words, self.rng
        a, b = rng.randint(1, 19), rng.randint(1, 19)
        if a + b <= 20 and rng.random() < 0.5:
            return f"{numbers[a - 1]} plus {numbers[b - 1]} is {numbers[a + b - 1]}"
        a, b = max(a, b) + 1, min(a, b)  # 2 <= a <= 20, 1 <= b < a
        return f"{numbers[a - 1]} minus {numbers[b - 1]} is {numbers[a - b - 1]}"

    def quantity(self) -> str:
        """``N <unit>`` where the unit drifts from seconds to years as N grows.

        Its weights are a wide bump over the units centred at a point moving linearly with N, so
        signatures of numbers change smoothly along the whole range: the order is the dominant
        direction (PC1), not only a chain of local neighbours, which folds into a horseshoe.
        """
        numbers, rng = SYNTHETIC_GROUPS["numbers"].words, self.rng
        n = rng.randrange(len(numbers))
        centre = n * (len(_UNITS) - 1) / (len(numbers) - 1)
        weights = [math.exp(-0.5 * ((k - centre) / 1.5) ** 2) for k in range(len(_UNITS))]
        who = rng.choice(("we waited", "it took", "she stayed", "they worked"))
        return f"{who} {numbers[n]} {rng.choices(_UNITS, weights)[0]}"

    def _calendar(self, group: str, preposition: str, frames: tuple[str, ...]) -> str:
        words, rng = SYNTHETIC_GROUPS[group].words, self.rng
        form = rng.random()
        if form < 0.5:
            return rng.choice(frames) + " " + self.listing(words)
        i = rng.randrange(len(words))
        if form < 0.75:
            return f"after {words[i]} comes {words[(i + 1) % len(words)]}"
        return f"{preposition} {words[i]} {self.filler()}"

    def weekdays(self) -> str:
        return self._calendar("weekdays", "on", ("we work", "the shop opens", "she trains", "it rained on"))

    def months(self) -> str:
        return self._calendar("months", "in", ("we travel in", "it snows in", "they planted in", "the birds sing in"))

    def colours(self) -> str:
        word = self.rng.choice(SYNTHETIC_GROUPS["colours"].words)
        noun = self.follower("colours", word)
        return self.rng.choice((f"the {word} {noun} is {self.rng.choice(_ADJECTIVES)}",
                                f"{self.rng.choice(_SUBJECTS)} {self.rng.choice(_VERBS)} the {word} {noun}"))

    def family(self) -> str:
        first, second = self.rng.sample(SYNTHETIC_GROUPS["family"].words, 2)
        if self.rng.random() < 0.3:
            return f"my {first} and my {second} {self.follower('family', second)}"
        return f"my {first} {self.follower('family', first)}"

    def countries(self) -> str:
        word = self.rng.choice(SYNTHETIC_GROUPS["countries"].words)
        who, verb = self.rng.choice(_SUBJECTS), self.rng.choice(("flew to", "moved to", "travelled to", "drove to"))
        return f"{who} {verb} {word} {self.follower('countries', word)}"

    def languages(self) -> str:
        word = self.rng.choice(SYNTHETIC_GROUPS["languages"].words)
        who, verb = self.rng.choice(_SUBJECTS), self.rng.choice(("writes", "reads", "wrote", "tests"))
        return f"{who} {verb} {word} {self.follower('languages', word)}"

    def filler(self) -> str:
        rng = self.rng
        if rng.random() < 0.7:
            return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
        return f"{rng.choice(_OBJECTS)} is {rng.choice(_ADJECTIVES)}"


def synthetic_corpus(n_sentences: int = 20000, seed: int = 0) -> str:
    """The built-in corpus: ``n_sentences`` lines of lowercase words separated by single spaces,
    each ending with " ." and a newline; the same ``seed`` gives the same text.

    Its next-token statistics carry the structure of :data:`SYNTHETIC_GROUPS`: number words in
    counting runs ("we count three four five") and arithmetic ("three plus four is seven"),
    weekdays and months in runs that wrap around ("the shop opens saturday sunday and monday"),
    and category words followed by their category's own words ("the red car", "my mother
    smiled", "she flew to france again", "he writes python code"), among filler sentences.
    20,000 sentences are about 0.63 MB and take well under a second.
    """
    if isinstance(n_sentences, bool) or not isinstance(n_sentences, int) or n_sentences < 1:
        raise InputError(f"n_sentences must be a positive integer, got {n_sentences!r}")
    grammar = _Grammar(seed)
    return "".join(grammar.sentence() + "\n" for _ in range(n_sentences))

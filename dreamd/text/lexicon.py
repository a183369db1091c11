"""lemminflect's dictionary of English (lemmas and inflections), read a word at a time."""

from __future__ import annotations

import bisect
import functools
import gzip
import re
from array import array
from collections.abc import Callable
from typing import Any

from lemminflect.codecs.InflectionLUCodec import InflectionLUCodec
from lemminflect.codecs.LemmaLUCodec import LemmaLUCodec
from lemminflect.core.Inflections import Inflections
from lemminflect.core.Lemmatizer import Lemmatizer
from lemminflect.core.LexicalUtils import categoryToUPos

# lemminflect's dictionary of English, read a word at a time. lemminflect parses its whole
# lemma and inflection tables (120,000 lines) into dicts of tuples on first use: 0.4 s of
# CPU in every process that extracts facts, before its first sentence (a fleet of sixteen
# workers on two cores spends 7 s of it). Here each table's lines are only found by their
# word when first needed (the lines' offsets: 0.03 s), and a word's lines are parsed by
# lemminflect's own codecs when it is first looked up; its lookups, overrides and rules
# for unknown words are unchanged. tests/test_lexicon.py checks that every word of both
# tables reads as lemminflect's own load reads it.


class ByWord:
    """One of lemminflect's tables as the mapping it looks words up in (`.get`): its
    text kept whole, a word found by halving (the table is in the order of its words),
    a word's entry parsed at its first lookup. The text and its lines' offsets take
    about 3 MB where a string and an index entry per line took about 25 MB."""

    def __init__(self, path: str, parse: Callable[[str], tuple[str, dict[str, Any]]],
                 fixed: dict[str, dict[str, Any]] | None = None) -> None:
        with open(path, "rb") as f:
            self._text = gzip.decompress(f.read()).decode("utf-8").rstrip("\n") + "\n"
        self._starts = array("l", [0])
        self._starts.extend(m.end() for m in _LINE_END.finditer(self._text))
        self._rows = len(self._starts) - 1  # the last offset is the text's end
        self._parse = parse
        self._parsed: dict[str, dict[str, Any]] = dict(fixed or {})

    def _word(self, row: int) -> str:
        start = self._starts[row]
        return self._text[start:self._text.find(",", start)]

    def get(self, word: str, default: Any = None) -> Any:
        if word in self._parsed:
            return self._parsed[word]
        row = bisect.bisect_left(range(self._rows), word, key=self._word)
        if row >= self._rows or self._word(row) != word:
            return default
        entry: dict[str, Any] = {}
        while row < self._rows and self._word(row) == word:  # a word's lines follow on
            entry.update(self._parse(self._text[self._starts[row]:self._starts[row + 1] - 1])[1])
            row += 1
        self._parsed[word] = entry
        return entry

    def words(self) -> set[str]:
        return {self._word(row) for row in range(self._rows)} | set(self._parsed)


_LINE_END = re.compile("\n")


def _lemma_line(line: str) -> tuple[str, dict[str, Any]]:
    word, category, forms = LemmaLUCodec.fromString(line)
    return word, {categoryToUPos(category): forms}


def _inflection_line(line: str) -> tuple[str, dict[str, Any]]:
    word, _, forms = InflectionLUCodec.fromString(line)
    return word, forms


@functools.cache
def tables() -> None:
    """lemminflect's two singletons given the tables read a word at a time (each looks
    for its table's attribute before it loads one)."""
    lemmatizer, inflections = Lemmatizer(), Inflections()
    if not hasattr(lemmatizer, "lemma_dict"):
        lemmatizer.lemma_dict = ByWord(lemmatizer.lemma_lu_fn, _lemma_line)
    if not hasattr(inflections, "infl_dict"):
        # The modal and auxiliary verbs' forms are lemminflect's own, set after its load.
        inflections.infl_dict = ByWord(inflections.infl_lu_fn, _inflection_line,
                                       InflectionLUCodec.updateForAuxMod({}))

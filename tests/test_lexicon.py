"""The dictionary read a word at a time reads every word as lemminflect's own load does."""

from __future__ import annotations

from lemminflect.codecs.InflectionLUCodec import InflectionLUCodec
from lemminflect.codecs.LemmaLUCodec import LemmaLUCodec
from lemminflect.core.Inflections import Inflections
from lemminflect.core.Lemmatizer import Lemmatizer

from dreamd.text.lexicon import ByWord, _inflection_line, _lemma_line
from dreamd.text.speech import inflection, lemmas


def test_every_word_of_both_tables_reads_as_lemminflect_loads_it() -> None:
    for path, parse, load, fixed in (
            (Lemmatizer().lemma_lu_fn, _lemma_line, LemmaLUCodec.load, None),
            (Inflections().infl_lu_fn, _inflection_line, InflectionLUCodec.load,
             InflectionLUCodec.updateForAuxMod({}))):
        whole = load(path)
        lazy = ByWord(path, parse, fixed)
        assert lazy.words() == set(whole)
        assert [w for w in whole if lazy.get(w) != whole[w]] == []
        assert lazy.get("no-such-word-at-all") is None


def test_lookups_go_through_the_table_read_a_word_at_a_time() -> None:
    assert lemmas("went")["VERB"] == ("go",)
    assert inflection("go", "VBD") == ("went",)
    assert inflection("be", "VBD") == ("was", "were")  # lemminflect's own auxiliaries
    assert inflection("can", "VBD") == ("could",)
    assert isinstance(Lemmatizer().lemma_dict, ByWord)
    assert isinstance(Inflections().infl_dict, ByWord)

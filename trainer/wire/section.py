"""The base of every section of the built-in trainer's parameters (:mod:`trainer.wire.config`,
:mod:`trainer.wire.data_config`): unknown keys refused, each field described by its attribute docstring, no
inf or nan, and the words YAML reads as booleans taken back where a key takes words."""

from __future__ import annotations

from pydantic import ConfigDict

from trainer.wire.yaml_words import WordsAsWritten


class Section(WordsAsWritten):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

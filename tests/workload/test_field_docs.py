"""Field descriptions read from the source when asked (``trainer.wire.field_docs``): what pydantic's own
``use_attribute_docstrings`` reads, for every model of the workload, the trainer's parameters and the user's
settings; the JSON Schema and the editor's help carry them; no model reads its source as it is made."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import pytest
from pydantic import BaseModel, Field
from pydantic._internal._docs_extraction import extract_docstrings_from_cls

from launcher.runs.core.user_settings import UserSettings
from launcher.workload.model import Workload
from launcher.workload.schema_walk import help_for, workload_schema
from trainer.wire import field_docs
from trainer.wire.config import TrainerConfig

MODELS = field_docs.models_under(Workload, TrainerConfig, UserSettings)


def _pydantic_reads(model: type[BaseModel], name: str) -> str | None:
    """What ``use_attribute_docstrings`` gives a field: its ``Field(description=...)``, else the docstring
    under it in the class that declares it last (pydantic's own reader of a class's source)."""
    field = model.model_fields[name]
    if field.description is not None:
        return field.description
    owner = next(k for k in model.__mro__ if name in inspect.get_annotations(k))
    return extract_docstrings_from_cls(owner, use_inspect=True).get(name)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_field_is_described_as_pydantic_reads_it(name):
    model = MODELS[name]
    got = {f: field_docs.description(model, f) for f in model.model_fields}
    assert got == {f: _pydantic_reads(model, f) for f in model.model_fields}


def test_the_models_hold_descriptions_enough_to_check():
    described = sum(field_docs.description(m, f) is not None for m in MODELS.values() for f in m.model_fields)
    assert len(MODELS) >= 30 and described >= 200


def test_a_field_given_again_in_a_subclass_is_described_there_and_an_explicit_description_wins():
    class Base(BaseModel):
        a: int = 1
        """Base's a."""
        b: int = 2
        """Base's b."""
        c: int = Field(3, description="given")
        """Not this."""

    class Child(Base):
        b: int = 5
        d: int = 4
        """Child's d."""

    assert [field_docs.description(Child, f) for f in "abcd"] == ["Base's a.", None, "given", "Child's d."]
    assert [field_docs.description(Child, f) for f in "abcd"] == [_pydantic_reads(Child, f) for f in "abcd"]


def test_two_models_of_one_name_are_refused_where_the_schema_would_merge_them():
    """``$defs`` names a model by its class: a second model of that name (here in the trainer's tree, as
    ``workload_schema`` merges it with the workload's) would be described as the first. Refused, naming both."""
    first = type("Limits", (BaseModel,), {"__annotations__": {"steps": int}, "__module__": "workload_side"})
    second = type("Limits", (BaseModel,), {"__annotations__": {"rows": int}, "__module__": "trainer_side"})
    holds_first = type("Outer", (BaseModel,), {"__annotations__": {"limits": first}, "__module__": "workload_side"})
    with pytest.raises(TypeError, match=r"two models named Limits \(workload_side.Limits and trainer_side.Limits\)"):
        field_docs.models_under(holds_first, second)
    assert field_docs.models_under(holds_first, first) == {"Outer": holds_first, "Limits": first}


def test_the_schema_and_the_editors_help_carry_each_description():
    schema = workload_schema()
    defs = schema["$defs"]
    ssh = defs["Ssh"]["properties"]
    assert ssh["lost_after_s"]["description"] == field_docs.description(MODELS["Ssh"], "lost_after_s")
    trainer = defs["TrainerConfig"]["properties"]
    assert trainer["max_steps"]["description"] == field_docs.description(TrainerConfig, "max_steps")
    for def_name, body in [("Workload", schema), *defs.items()]:
        model = MODELS[def_name]
        for key, prop in body.get("properties", {}).items():
            name = next((n for n, f in model.model_fields.items() if (f.alias or n) == key), key)
            assert prop.get("description") == field_docs.description(model, name), (def_name, key)
            assert list(prop) == sorted(prop), (def_name, key)  # where pydantic writes it: a field's keys sorted
    info = help_for(("parameters", "optim", "warmup_steps"), None)
    assert info is not None and info.description.startswith("Linear warmup over this many steps")


def test_no_model_reads_its_source_as_it_is_made():
    """The cost this saves: importing the models reads no source, and none asks pydantic to."""
    code = textwrap.dedent("""
        import inspect, json
        reads = []
        findsource = inspect.findsource
        inspect.findsource = lambda *args, **kwargs: reads.append(1) or findsource(*args, **kwargs)
        import launcher.workload.model, launcher.runs.core.user_settings, trainer.wire.config
        from trainer.wire import field_docs
        print(json.dumps({"parsed": field_docs._module_docs.cache_info().currsize, "sources_read": len(reads)}))
    """)
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    assert out == {"parsed": 0, "sources_read": 0}
    assert not [name for name, m in MODELS.items() if m.model_config.get("use_attribute_docstrings")]

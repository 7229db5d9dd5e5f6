"""Each model field's description, the docstring written under it, read from the source when first asked.

Pydantic's ``use_attribute_docstrings`` reads them as each class is made, at every import: on Python
before 3.13 by walking the caller's frames and parsing each class's source: about 45 ms of each command's
and run owner's start, 18 ms of each rank's, for help only the editor and ``fsdp-tui schema`` show. Here
a module's source is parsed once, when a description is first wanted, and what pydantic would have read is
given: the string statement right under an annotated field, cleaned as :func:`inspect.cleandoc` cleans it,
from the class that declares the field last; a description given in ``Field(description=...)`` wins.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any


def description(model: type, name: str) -> str | None:
    """The description of field ``name`` of pydantic model ``model``: its ``Field(description=...)``,
    else the docstring under it where it is declared (in ``model`` or the nearest base), else ``None``."""
    field = getattr(model, "model_fields", {}).get(name)
    if field is not None and field.description is not None:
        return field.description
    for klass in model.__mro__:  # the class that declares it last: a field declared again is described again
        if name in inspect.get_annotations(klass):
            return _class_docs(klass.__module__, klass.__qualname__).get(name)
    return None


def fill_schema(schema: dict[str, Any], root: type) -> dict[str, Any]:
    """A JSON Schema of ``root`` (pydantic's ``model_json_schema``) with each property's missing
    description filled in, under ``$defs`` too (each named by its model's class)."""
    models = models_under(root)
    for props, model in [(schema.get("properties", {}), root),
                         *((d.get("properties", {}), models[n]) for n, d in schema.get("$defs", {}).items()
                           if n in models)]:
        by_key = {(f.alias or name): name for name, f in model.model_fields.items()}
        for key, prop in props.items():
            doc = description(model, by_key.get(key, key))
            if doc is not None and "description" not in prop:  # in its place: pydantic sorts a field's keys
                props[key] = dict(sorted({**prop, "description": doc}.items()))
    return schema


def models_under(*roots: type) -> dict[str, type]:
    """Every pydantic model the ``roots`` are or their fields hold (through lists, mappings and unions), by
    class name: the name a JSON Schema's ``$defs`` gives it. Two models of one name would meet there, one
    described as the other: refused (``TypeError``, naming both), so a test that builds the schema fails."""
    found: dict[str, type] = {}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and hasattr(tp, "model_fields"):
            if found.get(tp.__name__) is tp:
                return
            if tp.__name__ in found:
                other = found[tp.__name__]
                raise TypeError(f"two models named {tp.__name__} ({other.__module__}.{other.__qualname__} and "
                                f"{tp.__module__}.{tp.__qualname__}) would share one entry of the schema's "
                                "$defs: rename one")
            found[tp.__name__] = tp
            for field in tp.model_fields.values():
                visit(field.annotation)
        for arg in getattr(tp, "__args__", ()) or ():
            visit(arg)
        for meta in getattr(tp, "__metadata__", ()) or ():
            visit(meta)

    for root in roots:
        visit(root)
    return found


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Every class of ``module`` (by qualified name): its fields' docstrings."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return {}
    found: dict[str, dict[str, str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[prefix + node.name] = _docs_of(node.body)
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, f"{prefix}{node.name}.<locals>.")

    visit(tree.body, "")
    return found


def _class_docs(module: str, qualname: str) -> dict[str, str]:
    return _module_docs(module).get(qualname, {})


def _docs_of(body: list[ast.stmt]) -> dict[str, str]:
    """Each annotated name in a class body followed by a string statement: that string, cleaned."""
    docs: dict[str, str] = {}
    for stmt, following in zip(body, body[1:], strict=False):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[stmt.target.id] = inspect.cleandoc(following.value.value)
    return docs

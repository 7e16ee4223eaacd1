"""The schema engine: plain YAML data checked against typed dataclasses, every error keyed by its dotted path.

Recipes (config.py), objectives' own settings (objectives/__init__.py) and fine-tuning's `--set` (finetune/loop.py)
all check values here, so a wrong value reads the same wherever it was given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing

from polyalign.io import DataError


class RecipeError(DataError):
    """A recipe value that does not fit the schema; `key` is its dotted path (e.g. `trainer.lr`)."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


_KIND = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def check_value(hint, value, key: str):
    """`value` (plain YAML data) as type `hint`, or a RecipeError naming the key, the value and what is allowed."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, key)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(inner) < len(typing.get_args(hint)):
            return None
        for option in inner[:-1]:  # the first type the value is (`bool | str`: true, false or a word)
            with contextlib.suppress(RecipeError):
                return check_value(option, value, key)
        try:
            return check_value(inner[-1], value, key)
        except RecipeError:
            kinds = " or ".join(_KIND.get(t, getattr(t, "__name__", str(t))) for t in inner)
            raise RecipeError(key, f"{value!r} is not {kinds}") from None
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise RecipeError(key, f"{value!r} is not a list")
        return [check_value(item, v, f"{key}.{i}") for i, v in enumerate(value)]
    if origin is tuple:
        items = typing.get_args(hint)
        if not isinstance(value, list | tuple) or len(value) != len(items):
            raise RecipeError(key, f"{value!r} is not a list of {len(items)} values")
        return tuple(check_value(t, v, f"{key}.{i}") for i, (t, v) in enumerate(zip(items, value, strict=True)))
    if hint is dict:
        if not isinstance(value, dict):
            raise RecipeError(key, f"{value!r} is not a mapping")
        return value
    if hint is float and isinstance(value, str):  # YAML 1.1 reads `1e-4` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    ok = isinstance(value, hint) and not (hint is not bool and isinstance(value, bool))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise RecipeError(key, f"{value!r} is not {_KIND.get(hint, hint.__name__)}")
    return value


def build_dataclass(cls, value, key: str):
    """An instance of dataclass `cls` from a mapping, each value checked against its field (see check_value)."""
    if not isinstance(value, dict):
        raise RecipeError(key, f"{value!r} is not a mapping (expected keys: {', '.join(field_names(cls))})")
    hints = typing.get_type_hints(cls)
    for k in value:
        if k not in hints or k not in field_names(cls):
            raise RecipeError(join_key(key, str(k)), f"unknown key; known: {', '.join(field_names(cls))}")
    kwargs = {k: check_value(hints[k], v, join_key(key, k)) for k, v in value.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:  # __post_init__ range checks
        raise RecipeError(key, str(err).splitlines()[0]) from None


def field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def join_key(key: str, part: str) -> str:
    return f"{key}.{part}" if key else part

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


FLAT = "flat"
"""Field metadata key (`flat_field`): a dataclass-valued field whose own keys a recipe writes beside its holder's."""


def flat_field(default_factory):
    """A config held by another whose keys a recipe writes at the holder's level: TRTD's config holds its TLM
    batch settings, yet `objectives.N.config.mask_prob` stays the key users write. The holder's default
    (`default_factory()`) supplies every key the recipe leaves out."""
    return dataclasses.field(default_factory=default_factory, metadata={FLAT: True})


def build_dataclass(cls, value, key: str):
    """An instance of dataclass `cls` from a mapping, each value checked against its field (see check_value)."""
    if not isinstance(value, dict):
        raise RecipeError(key, f"{value!r} is not a mapping (expected keys: {', '.join(field_names(cls))})")
    known = field_names(cls)
    for k in value:
        if k not in known:
            raise RecipeError(join_key(key, str(k)), f"unknown key; known: {', '.join(known)}")
    return _build(cls, value, key, None)


def _build(cls, value: dict, key: str, base):
    """`cls` from the keys of `value` it or its flat fields own; `base` (an instance) fills the keys not given."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get(FLAT):
            start = getattr(base, f.name) if base is not None else f.default_factory()
            kwargs[f.name] = _build(hints[f.name], value, key, start)
        elif f.name in value:
            kwargs[f.name] = check_value(hints[f.name], value[f.name], join_key(key, f.name))
    try:
        return cls(**kwargs) if base is None else dataclasses.replace(base, **kwargs)
    except (TypeError, ValueError) as err:  # __post_init__ range checks
        raise RecipeError(key, str(err).splitlines()[0]) from None


def field_names(cls) -> list[str]:
    """The keys a recipe writes for dataclass `cls`: its fields, a flat field's own keys in its place."""
    hints = typing.get_type_hints(cls)
    names: list[str] = []
    for f in dataclasses.fields(cls):
        names += field_names(hints[f.name]) if f.metadata.get(FLAT) else [f.name]
    if len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: a flat field repeats a key of its holder ({names})")
    return names


def flat_values(config) -> dict:
    """A config instance as the keys a recipe writes (flat fields spread into their holder): the inverse of
    build_dataclass for the settings it holds."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out |= flat_values(value) if f.metadata.get(FLAT) else {f.name: value}
    return out


def join_key(key: str, part: str) -> str:
    return f"{key}.{part}" if key else part

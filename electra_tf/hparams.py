"""Hparam objects: dataclass fields as defaults, ``**kwargs`` updates checked by name and type.

An unknown name is a one-line error that suggests the closest known one; a value of the wrong
type names the expected type. ``electra_tf.config`` builds the official configs on this.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import string
import types
import typing
from typing import Any


def _type_ok(value: Any, tp: Any) -> bool:
  """Whether a JSON-ish value fits a field annotation (bool is not an int, an int is a float)."""
  origin = typing.get_origin(tp)
  if origin in (typing.Union, types.UnionType):
    return any(_type_ok(value, arg) for arg in typing.get_args(tp))
  if tp is Any:
    return True
  if tp is type(None):
    return value is None
  if tp is bool:
    return isinstance(value, bool)
  if tp is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if tp is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if origin is list:
    (item,) = typing.get_args(tp)
    return isinstance(value, list) and all(_type_ok(v, item) for v in value)
  if origin is dict:
    return isinstance(value, dict)
  return isinstance(value, tp)


def _type_name(tp: Any) -> str:
  if isinstance(tp, type) and not typing.get_args(tp):
    return tp.__name__
  return str(tp).replace("typing.", "").replace("NoneType", "None")


class HParams:
  """Shared machinery: defaults from the dataclass fields, checked ``**kwargs`` updates."""

  # name -> why it cannot be passed in (the official raises "Unknown hparam" for these)
  _NOT_SETTABLE: typing.ClassVar[dict[str, str]] = {}
  # hparams that are path templates with this many "{}" slots, exposed as methods
  _TEMPLATES: typing.ClassVar[dict[str, int]] = {}

  def _set_defaults(self) -> None:
    for f in dataclasses.fields(self):
      if f.default_factory is not dataclasses.MISSING:
        setattr(self, f.name, f.default_factory())
      else:
        setattr(self, f.name, f.default)

  @classmethod
  def _check_kwargs(cls, kwargs: dict[str, Any]) -> None:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)] + list(cls._TEMPLATES)
    for key, value in kwargs.items():
      if key in cls._NOT_SETTABLE:
        raise ValueError(f"hparam {key!r} cannot be set: {cls._NOT_SETTABLE[key]}")
      if key not in names:
        near = difflib.get_close_matches(key, names, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"Unknown hparam {key!r} for {cls.__name__}{hint}")
      if key in cls._TEMPLATES:
        cls._check_template(key, value)
      elif not _type_ok(value, hints[key]):
        raise ValueError(f"hparam {key!r} must be {_type_name(hints[key])}, "
                         f"got {type(value).__name__} {value!r}")

  @classmethod
  def _check_template(cls, key: str, value: Any) -> None:
    n = cls._TEMPLATES[key]
    try:
      slots = sum(field is not None for _, field, _, _ in string.Formatter().parse(value))
      ok = slots == n and bool(value.format(*["x"] * n))
    except (AttributeError, TypeError, IndexError, KeyError, ValueError):
      ok = False
    if not ok:
      raise ValueError(f"hparam {key!r} must be a path template with {n} '{{}}' slot(s), "
                       f"got {value!r}")

  def _update(self, kwargs: dict[str, Any]) -> None:
    for key, value in kwargs.items():
      if key in self._TEMPLATES:
        self._templates[key] = value
      else:
        setattr(self, key, copy.deepcopy(value))

  def to_dict(self) -> dict[str, Any]:
    """Every hparam after construction (path templates as format strings)."""
    d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
    d.update(getattr(self, "_templates", {}))
    return d

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)

  def __eq__(self, other: object) -> bool:
    return type(other) is type(self) and other.to_dict() == self.to_dict()

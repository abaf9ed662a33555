"""JSON schemas and validation for Python types, through pydantic, with attrs classes understood.

Tool arguments and structured output share it: `adapter(T)` validates what a model sent into a `T`
(nested attrs classes and dataclasses built, enums and Literals checked, ints from 3.0), and
`json_schema(adapter)` is the schema the model is shown.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping
from typing import Annotated, Any, NotRequired, Required, Union, get_args, get_origin, get_type_hints

import attrs
import pydantic
from pydantic import ConfigDict, Field, GetPydanticSchema, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticSerializationError, core_schema, to_jsonable_python
from typing_extensions import TypedDict

from agentloop._docstrings import parse_docstring


@attrs.frozen
class FieldSpec:
    """One named field of an object a model fills in: a tool parameter or an attrs attribute."""

    name: str
    annotation: Any
    required: bool
    default: Any = attrs.NOTHING  # or no default the schema can show: the class or function applies its own
    description: str | None = None


def object_type(name: str, fields: Mapping[str, FieldSpec] | list[FieldSpec], description: str | None = None) -> Any:
    """A TypedDict of `fields` that refuses other keys, for pydantic to validate and describe."""
    items = fields.values() if isinstance(fields, Mapping) else fields
    members: dict[str, Any] = {}
    for spec in items:
        options: dict[str, Any] = {"description": spec.description} if spec.description else {}
        if not spec.required and spec.default is not attrs.NOTHING and _jsonable(spec.default):
            options["default"] = spec.default
        annotated = Annotated[pydantic_type(spec.annotation), Field(**options)] if options else pydantic_type(spec.annotation)
        members[spec.name] = Required[annotated] if spec.required else NotRequired[annotated]
    typed = TypedDict(name, members)  # type: ignore[misc]
    typed.__pydantic_config__ = ConfigDict(extra="forbid", title=name)  # type: ignore[attr-defined]
    if description:
        typed.__doc__ = description
    return typed


def _jsonable(value: Any) -> bool:
    try:
        to_jsonable_python(value)
    except PydanticSerializationError:
        return False
    return True


def _class_fields(cls: type) -> list[FieldSpec]:
    """The fields `cls` (an attrs class or a dataclass) is built from, described from its docstring."""
    described = parse_docstring(cls.__doc__).parameters
    if attrs.has(cls):
        return [
            FieldSpec(field.alias, field.type, field.default is attrs.NOTHING,
                      attrs.NOTHING if isinstance(field.default, attrs.Factory) else field.default,  # type: ignore[arg-type]
                      described.get(field.alias) or described.get(field.name))
            for field in attrs.fields(attrs.resolve_types(cls))
            if field.init
        ]
    hints = get_type_hints(cls, include_extras=True)
    return [
        FieldSpec(field.name, hints[field.name],
                  field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING,
                  attrs.NOTHING if field.default is dataclasses.MISSING else field.default, described.get(field.name))
        for field in dataclasses.fields(cls)
        if field.init
    ]


def class_summary(annotation: Any) -> str:
    """What the docstring of a class of the user's says it is; "" for a type the user did not
    write (a builtin, `list[...]`) and for a dataclass's generated docstring (its signature, no prose)."""
    if not isinstance(annotation, type) or annotation.__module__ == "builtins":
        return ""
    summary = parse_docstring(annotation.__doc__).description
    return "" if dataclasses.is_dataclass(annotation) and summary.startswith(f"{annotation.__name__}(") else summary


@functools.cache
def _class_type(cls: type) -> Any:
    """`cls` (an attrs class or a dataclass) for pydantic: validated as an object of its init fields, then built."""
    shape = object_type(cls.__name__, _class_fields(cls), class_summary(cls) or None)

    def schema(source: Any, handler: pydantic.GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(lambda given: cls(**given), handler.generate_schema(shape))

    return Annotated[cls, GetPydanticSchema(schema)]


def pydantic_type(annotation: Any) -> Any:
    """`annotation` with every attrs class and dataclass in it (also inside lists, unions, dicts) made one
    pydantic validates (pydantic knows dataclasses, but not an attrs class inside one)."""
    if isinstance(annotation, type) and (attrs.has(annotation) or dataclasses.is_dataclass(annotation)):
        return _class_type(annotation)
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is None or not args:
        return annotation
    if origin is Annotated:
        return Annotated[(pydantic_type(args[0]), *annotation.__metadata__)]
    if origin in (Union, types.UnionType):
        return Union[tuple(pydantic_type(a) for a in args)]
    if getattr(origin, "__name__", "") == "Literal":
        return annotation
    try:
        return origin[tuple(a if a is Ellipsis else pydantic_type(a) for a in args)]
    except TypeError:
        return annotation


class _ModelSchema(GenerateJsonSchema):
    """Pydantic's JSON schema without the titles it makes up from field names: they tell a model nothing."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def adapter(annotation: Any) -> TypeAdapter[Any]:
    """A validator for `annotation`; raises pydantic's errors for a type it cannot handle."""
    return TypeAdapter(pydantic_type(annotation))


def json_schema(validator: TypeAdapter[Any]) -> dict[str, Any]:
    """The JSON schema a model is shown for values `validator` accepts."""
    schema = validator.json_schema(schema_generator=_ModelSchema)
    schema.pop("title", None)
    return schema


def error_lines(error: pydantic.ValidationError, noun: str) -> list[str]:
    """One short line per problem pydantic found: where it is (`noun`, such as "argument", names the
    top-level keys), what was wrong, what was sent."""
    lines = []
    for problem in error.errors(include_url=False):
        where = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in problem["loc"]).lstrip(".")
        if problem["type"] == "missing":
            lines.append(f"the {noun} {where!r} is required")
        elif problem["type"] == "extra_forbidden":
            lines.append(f"there is no {noun} {where!r}")
        else:
            lines.append(f"{where or 'the value'}: {problem['msg'].lower()}, got {problem['input']!r}")
    return lines

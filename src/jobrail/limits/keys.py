"""Limit keys: templates filled from a job's payload, and the names Redis stores them under."""

import string
from collections.abc import Mapping
from typing import Literal


class KeyTemplate:
    """A key such as ``vendor:{tenant_id}`` filled from a job's payload and tenant."""

    def __init__(self, template: str) -> None:
        fields = []
        for _literal, name, spec, conversion in string.Formatter().parse(template):
            if name is None:
                continue
            if not name.isidentifier() or spec or conversion:
                raise ValueError(f"key template {template!r}: use plain {{field}} placeholders")
            fields.append(name)
        self.template = template
        self.fields = tuple(fields)

    def render(self, values: Mapping[str, object]) -> str:
        return self.template.format_map({name: values[name] for name in self.fields})

    def __repr__(self) -> str:
        return f"KeyTemplate({self.template!r})"


# -- Redis Cluster slots ---------------------------------------------------------------
#
# Redis Cluster runs a script only on keys of one hash slot, and a job's limits are
# acquired by one script. A key's slot is decided by its *owner*, the part after its
# first ':' up to the next one: `vendor:acme`, `account:acme:a7` and
# `api:enqueue:ip:10.0.0.1` have the owners `acme`, `acme` and `enqueue`. A key
# without ':' is its own owner (`email-provider`). The Redis backend names a key with
# its owner in braces, a hash tag (`jobrail:tb:vendor:{acme}`), in a single Redis as
# well, so that a key has one name whatever the deployment.
#
# The rule reads the rendered key, not its template, so every key (a job's, the API's,
# the scheduler's, one an operator types) gets the same name wherever it comes from; and
# a key two job types share is one string, so one Redis key, for both. At start-up,
# `slot_part` tells from a template what will decide its keys' slot, and a job type
# whose keys would not agree is refused (only on a cluster: see JobLimits.check_one_slot).
#
# Why the owner and not, say, the first placeholder: jobrail's keys are already written
# `what:{whose}`, and a rule on the rendered string needs no template to apply. Keys
# scoped by tenant (`vendor:{tenant_id}`) therefore spread over the cluster by tenant,
# each tenant's keys on one node; a key shared across tenants (`email-provider`) and a
# per-entity key can only be acquired together if the entity key names the same owner
# (`receipt:email-provider:{event_id}`).


def hash_tagged(key: str) -> str:
    """`key` with its owner in braces: the name the Redis backend stores it under.

    Braces and '%' in the parts before the hash tag's end are percent-escaped, so that
    the braces jobrail adds are the first ones Redis sees (a value such as ``a}b`` could
    otherwise end the tag early), and an empty owner is written ``%`` (``{}`` is no hash
    tag to Redis). Distinct keys keep distinct names: the escaping can be undone."""
    head, colon, rest = key.partition(":")
    if not colon:
        return "{" + _tag(key) + "}"
    owner, colon, tail = rest.partition(":")
    return f"{_escape(head)}:{{{_tag(owner)}}}{colon}{tail}"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _tag(owner: str) -> str:
    return _escape(owner) or "%"


SlotPart = tuple[Literal["field", "text"], str]


def slot_part(template: str) -> SlotPart | None:
    """What decides the slot of the keys `template` renders: one field's value
    (``("field", "tenant_id")`` for ``vendor:{tenant_id}``), a fixed text (``("text",
    "email-provider")`` for ``email-provider`` or ``receipt:email-provider:{event_id}``),
    or None when it depends on the values' contents (a value before the first ':', or
    one that is only a piece of the owner, as in ``vendor:eu-{tenant_id}``).

    A field works as the owner when it fills the whole part after the first ':'; a
    value with a ':' of its own then still gives every such key the same owner (the
    value up to its first ':')."""
    tokens: list[tuple[bool, str]] = []  # (is a field, literal text or field name)
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        if literal:
            if tokens and not tokens[-1][0]:
                tokens[-1] = (False, tokens[-1][1] + literal)
            else:
                tokens.append((False, literal))
        if name is not None:
            tokens.append((True, name))
    for i, (is_field, text) in enumerate(tokens):
        if is_field:
            return None  # a value before the first ':' may hold a ':' itself
        if ":" in text:
            after, rest = text.split(":", 1)[1], tokens[i + 1 :]
            break
    else:
        return ("text", "".join(text for _, text in tokens))
    if after:
        if ":" in after:
            return ("text", after.split(":", 1)[0])
        return None if rest else ("text", after)
    if not rest:
        return ("text", "")
    name = rest[0][1]  # literals are merged: what follows a literal is a field
    if len(rest) == 1 or (not rest[1][0] and rest[1][1].startswith(":")):
        return ("field", name)
    return None


def describe_slot(part: SlotPart | None) -> str:
    if part is None:
        return "its slot depends on the values (no single field follows its first ':')"
    kind, text = part
    return f"slot by field {text!r}" if kind == "field" else f"slot by the text {text!r}"

"""What a model call cost, in US dollars: from your own prices for a model, else from the
`genai-prices` table shipped with the package (offline; docs/adr/0021-usage-and-prices.md).

A model found in neither has no price: its cost is None, shown as unknown, never as zero.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import attrs

from agentloop.messages import Usage

__all__ = ["ModelPrice", "Prices"]

_MILLION = 1_000_000


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"a price cannot be negative: {attribute.name}={value!r}")


@attrs.frozen
class ModelPrice:
    """US dollars per million tokens: uncached input, output, and input read from or written to
    the prompt cache (None: priced as uncached input)."""

    input: float = attrs.field(validator=_non_negative)
    output: float = attrs.field(validator=_non_negative)
    cache_read: float | None = attrs.field(default=None, validator=_non_negative)
    cache_write: float | None = attrs.field(default=None, validator=_non_negative)

    def cost(self, usage: Usage) -> float:
        """The dollars `usage` costs at this price (its `input_tokens` include the cached ones)."""
        read, written = usage.cache_read_tokens, usage.cache_write_tokens
        uncached = max(usage.input_tokens - read - written, 0)
        per_read = self.input if self.cache_read is None else self.cache_read
        per_write = self.input if self.cache_write is None else self.cache_write
        total = uncached * self.input + usage.output_tokens * self.output + read * per_read + written * per_write
        return total / _MILLION


@attrs.frozen
class Prices:
    """Prices per model: `overrides` (a private or self-hosted model, or a negotiated rate; give a
    free local model `ModelPrice(0, 0)`) before the `genai-prices` table, unless `use_table` is false."""

    overrides: Mapping[str, ModelPrice] = attrs.field(factory=dict, converter=dict, hash=False)
    use_table: bool = True

    def cost(self, model: str | None, usage: Usage) -> float | None:
        """What `usage` of `model` cost in dollars; None when the price of `model` is not known."""
        if model is None:
            return None
        own = self.overrides.get(model)
        if own is not None:
            return own.cost(usage)
        if not self.use_table:
            return None
        return _table_cost(model, usage)


def _table_cost(model: str, usage: Usage) -> float | None:
    price = _table_price(model)
    if price is None or isinstance(price, ModelPrice):
        return None if price is None else price.cost(usage)
    from genai_prices import Usage as TableUsage

    counted = TableUsage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
    )
    return float(price.calc_price(counted)["total_price"])


@functools.cache
def _table_price(model: str) -> Any:
    """The table's price of `model` (its own model matching: "gpt-4o-2024-08-06" finds gpt-4o), or None;
    looked up once per model, the table imported on first use. A flat price becomes a `ModelPrice`
    (the table, too, prices a cache token without a price of its own as input); a tiered one is kept."""
    from decimal import Decimal

    from genai_prices import Usage as TableUsage
    from genai_prices import calc_price

    try:
        price = calc_price(TableUsage(input_tokens=0, output_tokens=0), model_ref=model).model_price
    except LookupError:
        return None
    def flat(rate: Any) -> float | None:
        return float(rate) if isinstance(rate, Decimal) else None

    read, write = flat(price.cache_read_mtok), flat(price.cache_write_mtok)
    input_rate, output_rate = flat(price.input_mtok), flat(price.output_mtok)
    tiered = (read is None and price.cache_read_mtok is not None) or (write is None and price.cache_write_mtok is not None)
    if input_rate is None or output_rate is None or tiered:
        return price
    return ModelPrice(input_rate, output_rate, read, write)

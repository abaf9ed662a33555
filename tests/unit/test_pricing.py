"""Prices: your own first, then the genai-prices table, and an unknown model has no price (never zero)."""

from __future__ import annotations

import pytest

from agentloop import ModelPrice, Prices, Usage


def test_a_models_own_price_counts_uncached_input_output_and_cache_reads_and_writes_apart() -> None:
    price = ModelPrice(input=2.0, output=10.0, cache_read=0.5)
    usage = Usage(4_000_000, 1_000_000, cache_read_tokens=2_000_000, cache_write_tokens=1_000_000)
    assert price.cost(usage) == pytest.approx(2.0 + 10.0 + 1.0 + 2.0)


def test_an_override_comes_before_the_table_and_a_free_local_model_costs_zero() -> None:
    prices = Prices({"gpt-4o": ModelPrice(1.0, 1.0), "llama3.1": ModelPrice(0, 0)})
    assert prices.cost("gpt-4o", Usage(1_000_000, 0)) == pytest.approx(1.0)
    assert prices.cost("llama3.1", Usage(5_000, 100)) == 0.0


def test_the_table_prices_known_models_with_their_cache_rates() -> None:
    """gpt-4o: $2.50 input, $1.25 cached input, $10 output per million (the genai-prices table)."""
    assert Prices().cost("gpt-4o", Usage(1200, 40, cache_read_tokens=1024)) == pytest.approx((176 * 2.5 + 1024 * 1.25 + 40 * 10) / 1e6)
    assert Prices().cost("gpt-4o-2024-08-06", Usage(1_000_000, 0)) == pytest.approx(2.5)


def test_a_tiered_table_price_is_computed_by_the_table() -> None:
    small, large = Prices().cost("gemini-2.5-pro", Usage(100_000, 0)), Prices().cost("gemini-2.5-pro", Usage(300_000, 0))
    assert small is not None and large is not None and large / 3 > small  # the tier above 200k tokens costs more


def test_an_unknown_model_or_none_has_no_price_and_the_table_can_be_switched_off() -> None:
    assert Prices().cost("our-private-finetune", Usage(10, 1)) is None
    assert Prices().cost(None, Usage(10, 1)) is None
    assert Prices(use_table=False).cost("gpt-4o", Usage(10, 1)) is None


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        ModelPrice(input=-1.0, output=0.0)


"""A split name no item hashes to is refused at once, not drawn for forever."""

from __future__ import annotations

import pytest

from evotrainer.domains import get_domain


@pytest.mark.parametrize("domain", ["math:column_add", "code:trivial"])
def test_an_unknown_split_is_refused(domain: str) -> None:
    with pytest.raises(ValueError, match="split must be one of"):
        get_domain(domain).tasks("test", 3, 0)  # type: ignore[arg-type]

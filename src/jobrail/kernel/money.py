import re
from dataclasses import dataclass

CURRENCY = re.compile(r"^[A-Z]{3}$")


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in integer minor units (cents) of one ISO 4217 currency."""

    amount_minor: int
    currency: str

    def __post_init__(self) -> None:
        if isinstance(self.amount_minor, bool) or not isinstance(self.amount_minor, int):
            raise TypeError("amount_minor must be an integer number of minor units")
        if not CURRENCY.match(self.currency):
            raise ValueError(f"currency {self.currency!r} is not an ISO 4217 code")

    @classmethod
    def zero(cls, currency: str) -> "Money":
        return cls(0, currency)

    def __add__(self, other: "Money") -> "Money":
        self._same_currency(other)
        return Money(self.amount_minor + other.amount_minor, self.currency)

    def times(self, quantity: int) -> "Money":
        return Money(self.amount_minor * quantity, self.currency)

    @property
    def is_negative(self) -> bool:
        return self.amount_minor < 0

    def _same_currency(self, other: "Money") -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot mix {self.currency} and {other.currency}")

"""Broken copies of the service, to show the checker catches what it claims to catch:
`python3 -m loadtest.lib.chaoslab.mutants NAME DIR` writes the mutant's change into the source
tree at DIR (a copy of the checkout). Each replaces one exact piece of code; it fails loudly if the
code has moved on, rather than building an unbroken "mutant"."""

import sys
from pathlib import Path

MUTANTS = {
    # The stock write without its fence: no token passed, so neither the claim check nor
    # the compare-and-set on the stock read applies (the write is the unguarded one). A
    # holder whose session expired while paused between its read and its write overwrites
    # the stock its successor wrote.
    "fence": ("src/inventory/stock.rs", [(
        """            self.product_id,
            self.claim.map(|c| c.epoch),
            self.claim.map(|c| c.zxid),
            next,""",
        """            self.product_id,
            None::<i64>,
            None::<i64>,
            next,""")]),
    # Payments without intents to go by: the sweep cannot know a charge was sent, so an
    # order whose charge's answer was lost is settled as never charged (`payment_failed`,
    # units back on sale) while the provider holds the money: "charged yet declared failed".
    "intents": ("src/orders/sweep.rs", [(
        """        Some(None) => {
            shop.payment
                .charge(&key, order.amount_cents, deadline)
                .await?
        }
        None => match shop.payment.lookup(&key, deadline).await? {
            Some(charge) => charge,
            // Never sent, so never charged.
            None => return unpaid(shop, order).await,
        },""",
        """        Some(None) | None => return unpaid(shop, order).await,""")]),
}


def main() -> None:
    name, root = sys.argv[1], Path(sys.argv[2])
    if name not in MUTANTS:
        sys.exit(f"unknown mutant {name}; the mutants: {', '.join(MUTANTS)}")
    path, changes = MUTANTS[name]
    text = (root / path).read_text()
    for old, new in changes:
        if text.count(old) != 1:
            sys.exit(f"mutant {name}: the code it breaks is no longer in {path}")
        text = text.replace(old, new)
    (root / path).write_text(text)
    print(f"mutant {name}: {path} changed")


if __name__ == "__main__":
    main()

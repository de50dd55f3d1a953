"""What the bash wrappers (loadtest/views, flood, run; scripts/test) ask of the servers they
started, written once. From the repository's root:

    ADMIN_TOKEN=… python3 -m loadtest.lib.common.cli product URL --name NAME --stock N \
        [--price-cents 100]
    SECKILL_PAYMENT_API_KEY=… python3 -m loadtest.lib.common.cli succeeded-charges PROVIDER_URL
    python3 -m loadtest.lib.common.cli tokens URL [NAME ...] [--prefix P --count N]

`product` creates a product on the instance at URL and prints its id; `succeeded-charges`
prints how many charges the payment provider's ledger holds as succeeded; `tokens` signs
buyers in at the instance's demo issuer (POST /api/session, `--buyer-auth demo`) and prints
one token a line, in the order of the names (each NAME, then P0 … P(N-1)). The admin token
and the API key come from the environment: `ps` shows any process's arguments to everyone on
the machine.
"""

import argparse
import os
import sys

from .web import HttpError, http_json, sign_in_many


def create_product(url: str, token: str, name: str, stock: int, price_cents: int = 100) -> int:
    """A new product on the instance at `url` (POST /api/products, as the admin): its id."""
    body = {"name": name, "price_cents": price_cents, "stock": stock}
    return http_json("POST", f"{url}/api/products", body, token)["id"]


def succeeded_charges(provider_url: str, key: str) -> int:
    """How many of the provider's charges (GET /v1/charges, with its API key) succeeded."""
    ledger = http_json("GET", f"{provider_url}/v1/charges", token=key)
    return sum(charge["status"] == "succeeded" for charge in ledger["charges"])


def buyer_names(names: list[str], prefix: str = "", count: int = 0) -> list[str]:
    """The names `tokens` signs in: each of `names`, then `prefix`0 … `prefix`(count-1)."""
    return [*names, *(f"{prefix}{i}" for i in range(count))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m loadtest.lib.common.cli",
                                     description="What the bash wrappers ask of the servers "
                                                 "they started (loadtest/views, flood, run; "
                                                 "scripts/test).")
    commands = parser.add_subparsers(dest="command", required=True)
    product = commands.add_parser("product", help="create a product (ADMIN_TOKEN); print its id")
    product.add_argument("url", help="the instance, e.g. http://127.0.0.1:18120")
    product.add_argument("--name", required=True)
    product.add_argument("--stock", type=int, required=True)
    product.add_argument("--price-cents", type=int, default=100)
    charges = commands.add_parser("succeeded-charges",
                                  help="count the provider's succeeded charges "
                                       "(SECKILL_PAYMENT_API_KEY)")
    charges.add_argument("provider_url", help="the provider, e.g. http://127.0.0.1:8090")
    tokens = commands.add_parser("tokens", help="sign buyers in at the demo issuer; print a "
                                                "token a line, in the names' order")
    tokens.add_argument("url", help="the instance (--buyer-auth demo), e.g. http://127.0.0.1:18099")
    tokens.add_argument("names", nargs="*", help="buyers to sign in, by name")
    tokens.add_argument("--prefix", default="buyer-", help="with --count: the names' prefix")
    tokens.add_argument("--count", type=int, default=0, help="that many more buyers: "
                                                             "PREFIX0, PREFIX1, …")
    args = parser.parse_args(argv)
    try:
        if args.command == "product":
            print(create_product(args.url, os.environ.get("ADMIN_TOKEN", ""), args.name,
                                 args.stock, args.price_cents))
        elif args.command == "tokens":
            names = buyer_names(args.names, args.prefix, args.count)
            if not names:
                parser.error("tokens: name at least one buyer, or give --count")
            print("\n".join(sign_in_many(args.url, names)))
        else:
            print(succeeded_charges(args.provider_url,
                                    os.environ.get("SECKILL_PAYMENT_API_KEY", "")))
    except (HttpError, OSError) as e:
        sys.exit(f"{args.command}: {e}")


if __name__ == "__main__":
    main()

"""What the bash wrappers (loadtest/views, flood, run) ask of the servers they started, written
once. From the repository's root:

    ADMIN_TOKEN=… python3 -m loadtest.common.cli product URL --name NAME --stock N \
        [--price-cents 100]
    SECKILL_PAYMENT_API_KEY=… python3 -m loadtest.common.cli succeeded-charges PROVIDER_URL

`product` creates a product on the instance at URL and prints its id; `succeeded-charges`
prints how many charges the payment provider's ledger holds as succeeded. The tokens come
from the environment: `ps` shows any process's arguments to everyone on the machine.
"""

import argparse
import os
import sys

from .web import HttpError, http_json


def create_product(url: str, token: str, name: str, stock: int, price_cents: int = 100) -> int:
    """A new product on the instance at `url` (POST /api/products, as the admin): its id."""
    body = {"name": name, "price_cents": price_cents, "stock": stock}
    return http_json("POST", f"{url}/api/products", body, token)["id"]


def succeeded_charges(provider_url: str, key: str) -> int:
    """How many of the provider's charges (GET /v1/charges, with its API key) succeeded."""
    ledger = http_json("GET", f"{provider_url}/v1/charges", token=key)
    return sum(charge["status"] == "succeeded" for charge in ledger["charges"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m loadtest.common.cli",
                                     description="What the bash wrappers ask of the servers "
                                                 "they started (loadtest/views, flood, run).")
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
    args = parser.parse_args(argv)
    try:
        if args.command == "product":
            print(create_product(args.url, os.environ.get("ADMIN_TOKEN", ""), args.name,
                                 args.stock, args.price_cents))
        else:
            print(succeeded_charges(args.provider_url,
                                    os.environ.get("SECKILL_PAYMENT_API_KEY", "")))
    except (HttpError, OSError) as e:
        sys.exit(f"{args.command}: {e}")


if __name__ == "__main__":
    main()

# The seckill server (and seckill-provider, the payment provider's stand-in that compose runs
# beside it): built on the official Rust image, run on Debian slim as a non-root user.
# docker-compose.yml builds it; scripts/test builds the same binary (cargo build --release --locked).
FROM rust:1-bookworm AS build
WORKDIR /src
# Dependencies first, against placeholder sources: this layer is rebuilt only when
# Cargo.toml or Cargo.lock change, not on every edit of our own code.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src
# migrations/ is compiled in (sqlx::migrate!), and every query is checked against .sqlx/ (the
# schema's description, made by scripts/sqlx-prepare): no database at build time. COPY keeps
# the checkout's modification times, which may be older than the placeholder build: touch, or
# cargo would keep the placeholder.
ENV SQLX_OFFLINE=true
COPY src src
COPY migrations migrations
COPY .sqlx .sqlx
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked

FROM debian:bookworm-slim
# CA certificates: both binaries speak TLS with rustls and the platform's roots
# (/etc/ssl/certs, read through rustls-native-certs), for `https://` to a real payment gateway
# and `sslmode=verify-full` to a managed PostgreSQL. SSL_CERT_FILE=/path/bundle.pem replaces
# these roots with a PEM bundle of your own (a private CA: append it to a copy of
# /etc/ssl/certs/ca-certificates.crt).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# A fixed uid, so volumes and policies (runAsNonRoot) can name it. The binary and the page
# stay owned by root: the service cannot rewrite them.
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin seckill
COPY --from=build /src/target/release/seckill /src/target/release/seckill-provider /usr/local/bin/
COPY static /srv/static
ENV SECKILL_STATIC_DIR=/srv/static \
    SECKILL_LISTEN=0.0.0.0:8080
USER 10001:10001
EXPOSE 8080
# The health check (GET /readyz) is in docker-compose.yml; this image has no curl, the check
# uses bash's /dev/tcp.
CMD ["seckill"]

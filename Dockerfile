# The seckill server, built from source on the official Rust image.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked

FROM debian:bookworm-slim
COPY --from=build /src/target/release/seckill /usr/local/bin/seckill
COPY static /srv/static
ENV SECKILL_STATIC_DIR=/srv/static \
    SECKILL_LISTEN=0.0.0.0:8080
EXPOSE 8080
CMD ["seckill"]

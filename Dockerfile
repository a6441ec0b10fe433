# flashtier in a container: a Rust build stage, then a slim Debian runtime with the binary
# only. Not built or run in this repository's CI (no Docker daemon there); see
# docs/operations.md. Build and run:
#   docker build -t flashtier .
#   docker run -p 11211:11211 -p 11299:11299 -v flashtier:/var/lib/flashtier flashtier
# Docker's default seccomp profile refuses io_uring: the flash engine then uses its
# blocking-IO thread pool (stats show extstore_backend=psync).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p flashtier-server \
    && objcopy --strip-debug target/release/flashtier /flashtier

FROM debian:bookworm-slim
RUN useradd --system --home-dir /var/lib/flashtier --create-home flashtier
COPY --from=build /flashtier /usr/bin/flashtier
COPY packaging/etc/kv.toml /etc/flashtier/kv.toml
USER flashtier
WORKDIR /var/lib/flashtier
VOLUME /var/lib/flashtier
EXPOSE 11211 11299
ENTRYPOINT ["/usr/bin/flashtier"]
CMD ["kv", "--config", "/etc/flashtier/kv.toml", "--listen", "0.0.0.0:11211", \
     "--admin", "0.0.0.0:11299", "--flash", "/var/lib/flashtier/flash.bin:1GiB", \
     "--log-format", "json"]

//! The NBD protocol (NetworkBlockDevice/nbd `doc/proto.md`) for flashtier's block face.

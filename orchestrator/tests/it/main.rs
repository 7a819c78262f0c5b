//! The orchestrator's integration tests, one test binary; each file is a module, so a test's name
//! starts with its file's. `router`, `console`, `openapi_document` and `proxy_keep_alive` run
//! without Docker; `e2e`, `attacks` and `runs` use the real Docker Engine and sandbox image,
//! `store` a throwaway Postgres cluster, `replicas` two orchestrators on one such cluster and
//! the Docker Engine, `cluster` a three-node Docker Swarm of its own, `rfb_fuzz` Xvfb and x11vnc (`.config/nextest.toml`
//! knows which).

mod attacks;
mod cluster;
mod common;
mod console;
mod e2e;
mod in_process;
mod openapi_document;
mod proxy_keep_alive;
mod replicas;
mod rfb_fuzz;
mod router;
mod runs;
mod store;
mod store_replicas;

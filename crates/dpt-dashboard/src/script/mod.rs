//! The user's own training script as a run (`dpt-tui run -- CMD`): the protocol its ranks speak
//! (`wire`), where each control lands (`steering`), the record it makes (`reports`), and the
//! thread that serves it (`backend`). The Python side is `python/dpt_tui`.

pub mod backend;
pub mod reports;
pub mod steering;
pub mod wire;

//! What a run keeps on disk and reads back: checkpoints (tensors and the state beside them),
//! safetensors files written atomically, continuing a run from a checkpoint, and starting from
//! other weights (`--init-from`). When and by which thread they are written is the
//! coordinator's (`engine::coordinator::persist` and `writer`).

pub mod checkpoint;
pub(crate) mod checkpoint_state;
pub mod init_from;
pub(crate) mod resume;
pub(crate) mod tensor_file;

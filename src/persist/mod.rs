//! What a run keeps on disk and reads back: checkpoints (tensors and the state beside them),
//! safetensors files written atomically, continuing a run from a checkpoint, and starting from
//! other weights (`--init-from`), and the names of a run directory's files. When and by which
//! thread they are written is the coordinator's (`engine::coordinator::persist` and `writer`).

pub mod checkpoint;
pub(crate) mod checkpoint_state;
pub mod init_from;
pub(crate) mod resume;
pub(crate) mod tensor_file;

/// The weights' file name inside a run directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// The weights' moving average (`--ema`) beside the raw weights.
pub const EMA_WEIGHTS_FILE: &str = "model_ema.safetensors";

/// The trained TorchScript model in a run directory (`torch.jit.load` reads it).
pub const SCRIPT_FILE: &str = "model.pt";

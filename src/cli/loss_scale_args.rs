//! The loss-scaling flags of mixed precision: on or off, the first scale, the growth interval.

use super::values::OnOff;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct LossScaleArgs {
    /// Dynamic loss scaling by torch.amp.GradScaler's rules: the loss multiplied by the scale
    /// before the backward pass; a step whose gradient overflows is skipped and the scale
    /// halved; doubled after --loss-scale-interval clean steps [default: on with --precision
    /// f16, or when the resumed run had it].
    #[arg(long, value_name = "on|off")]
    pub loss_scale: Option<OnOff>,

    /// The first loss scale [default: 65536].
    #[arg(long, value_name = "SCALE", allow_hyphen_values = true)]
    pub loss_scale_init: Option<f32>,

    /// Clean steps in a row before the loss scale doubles [default: 2000].
    #[arg(long, value_name = "N")]
    pub loss_scale_interval: Option<u32>,
}

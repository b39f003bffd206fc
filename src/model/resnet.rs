//! d2l's ResNet-18 for 1×28×28 inputs (seed 002): a 3×3 stride-1 stem with BatchNorm and no
//! max-pool, four stages of two residual blocks (64/128/256/512 channels, the first block of
//! stages 2-4 downsampling with stride 2 and a 1×1 projection), global average pool, linear.
//! Conv and linear weights N(0, 0.01); biases PyTorch's default; BatchNorm weight 1, bias 0.

use tch::Tensor;

use super::{default_bound, Builder, Forward, Init, Network};

const BN_MOMENTUM: f64 = 0.1;
const BN_EPS: f64 = 1e-5;

struct Conv {
    w: usize,
    b: usize,
    stride: i64,
    padding: i64,
}

impl Conv {
    fn new(b: &mut Builder, name: &str, cin: i64, cout: i64, k: i64, stride: i64) -> Self {
        let bound = default_bound(cin * k * k);
        Conv {
            w: b.param(format!("{name}.weight"), &[cout, cin, k, k], Init::Normal { std: 0.01 }),
            b: b.param(format!("{name}.bias"), &[cout], Init::Uniform { bound }),
            stride,
            padding: k / 2,
        }
    }

    fn apply(&self, p: &[Tensor], x: &Tensor, ctx: &Forward) -> Tensor {
        ctx.conv2d(x, &p[self.w], &p[self.b], self.stride, self.padding)
    }
}

struct BatchNorm {
    w: usize,
    b: usize,
    mean: usize,
    var: usize,
}

impl BatchNorm {
    fn new(b: &mut Builder, name: &str, c: i64) -> Self {
        BatchNorm {
            w: b.param(format!("{name}.weight"), &[c], Init::Ones),
            b: b.param(format!("{name}.bias"), &[c], Init::Zeros),
            mean: b.buffer(format!("{name}.running_mean"), &[c], Init::Zeros),
            var: b.buffer(format!("{name}.running_var"), &[c], Init::Ones),
        }
    }

    /// In the activations' format with f32 weights and statistics, as autocast runs BatchNorm.
    fn apply(&self, p: &[Tensor], buf: &[Tensor], x: &Tensor, train: bool) -> Tensor {
        x.batch_norm(
            Some(&p[self.w]),
            Some(&p[self.b]),
            Some(&buf[self.mean]),
            Some(&buf[self.var]),
            train,
            BN_MOMENTUM,
            BN_EPS,
            true,
        )
    }
}

struct Residual {
    conv1: Conv,
    bn1: BatchNorm,
    conv2: Conv,
    bn2: BatchNorm,
    projection: Option<Conv>,
}

impl Residual {
    fn new(b: &mut Builder, name: &str, cin: i64, cout: i64, stride: i64) -> Self {
        let projection = (stride != 1 || cin != cout)
            .then(|| Conv::new(b, &format!("{name}.conv3"), cin, cout, 1, stride));
        Residual {
            conv1: Conv::new(b, &format!("{name}.conv1"), cin, cout, 3, stride),
            bn1: BatchNorm::new(b, &format!("{name}.bn1"), cout),
            conv2: Conv::new(b, &format!("{name}.conv2"), cout, cout, 3, 1),
            bn2: BatchNorm::new(b, &format!("{name}.bn2"), cout),
            projection,
        }
    }

    fn apply(&self, p: &[Tensor], buf: &[Tensor], x: &Tensor, ctx: &Forward) -> Tensor {
        let train = ctx.train;
        let y = self.bn1.apply(p, buf, &self.conv1.apply(p, x, ctx), train).relu();
        let y = self.bn2.apply(p, buf, &self.conv2.apply(p, &y, ctx), train);
        let shortcut = match &self.projection {
            Some(conv) => conv.apply(p, x, ctx),
            None => x.shallow_clone(),
        };
        (y + shortcut).relu()
    }
}

/// Indices of ResNet-18's tensors.
pub struct Resnet18 {
    stem: Conv,
    stem_bn: BatchNorm,
    blocks: Vec<Residual>,
    fc: (usize, usize),
}

impl Resnet18 {
    pub fn new(b: &mut Builder) -> Self {
        let stem = Conv::new(b, "stem.conv", 1, 64, 3, 1);
        let stem_bn = BatchNorm::new(b, "stem.bn", 64);
        let mut blocks = Vec::new();
        let mut cin = 64;
        for (stage, cout) in [64i64, 128, 256, 512].into_iter().enumerate() {
            for i in 0..2 {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                let name = format!("stage{}.block{}", stage + 1, i + 1);
                blocks.push(Residual::new(b, &name, cin, cout, stride));
                cin = cout;
            }
        }
        let fc = (
            b.param("fc.weight", &[10, 512], Init::Normal { std: 0.01 }),
            b.param("fc.bias", &[10], Init::Uniform { bound: default_bound(512) }),
        );
        Resnet18 { stem, stem_bn, blocks, fc }
    }
}

impl Network for Resnet18 {
    fn forward(
        &self,
        p: &[Tensor],
        buf: &[Tensor],
        x: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, super::ForwardError> {
        let mut h = self.stem_bn.apply(p, buf, &self.stem.apply(p, x, ctx), ctx.train).relu();
        for block in &self.blocks {
            h = block.apply(p, buf, &h, ctx);
        }
        let n = h.size()[0];
        Ok(ctx.output(ctx.linear(
            &h.adaptive_avg_pool2d([1, 1]).reshape([n, -1]),
            &p[self.fc.0],
            &p[self.fc.1],
        )))
    }
}

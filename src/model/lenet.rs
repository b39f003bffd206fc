//! d2l's from-scratch LeNet variant (seed 001): conv3x3→20, ReLU, avg-pool 2; conv5x5→50, ReLU,
//! avg-pool 2; 800→128, ReLU; 128→10. Weights N(0, 0.01), biases zero.

use tch::Tensor;

use super::{Builder, Forward, Init, Network};

const W: Init = Init::Normal { std: 0.01 };

/// Indices of LeNet's tensors.
pub struct Lenet {
    c1: (usize, usize),
    c2: (usize, usize),
    f3: (usize, usize),
    f4: (usize, usize),
}

impl Lenet {
    pub fn new(b: &mut Builder) -> Self {
        Lenet {
            c1: (b.param("conv1.weight", &[20, 1, 3, 3], W), b.param("conv1.bias", &[20], Init::Zeros)),
            c2: (b.param("conv2.weight", &[50, 20, 5, 5], W), b.param("conv2.bias", &[50], Init::Zeros)),
            f3: (b.param("fc1.weight", &[128, 800], W), b.param("fc1.bias", &[128], Init::Zeros)),
            f4: (b.param("fc2.weight", &[10, 128], W), b.param("fc2.bias", &[10], Init::Zeros)),
        }
    }
}

impl Network for Lenet {
    fn forward(
        &self,
        p: &[Tensor],
        _buffers: &[Tensor],
        x: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, super::ForwardError> {
        let pool = |t: Tensor| t.avg_pool2d([2, 2], [2, 2], [0, 0], false, true, None::<i64>);
        let h = pool(ctx.conv2d(x, &p[self.c1.0], &p[self.c1.1], 1, 0).relu());
        let h = pool(ctx.conv2d(&h, &p[self.c2.0], &p[self.c2.1], 1, 0).relu());
        let n = h.size()[0];
        let h = ctx.linear(&h.reshape([n, -1]), &p[self.f3.0], &p[self.f3.1]).relu();
        Ok(ctx.output(ctx.linear(&h, &p[self.f4.0], &p[self.f4.1])))
    }
}

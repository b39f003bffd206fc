//! The PyTorch MNIST example network (seed 004): conv5x5→10, max-pool, ReLU; conv5x5→20,
//! Dropout2d, max-pool, ReLU; 320→50, ReLU, dropout; 50→10, log-softmax. PyTorch's default
//! initialization (uniform with bound 1/sqrt(fan_in)).

use tch::{Kind, Tensor};

use super::{channels_last, default_bound, Builder, Forward, Init, Network};

/// Indices of the network's tensors.
pub struct MnistNet {
    c1: (usize, usize),
    c2: (usize, usize),
    f1: (usize, usize),
    f2: (usize, usize),
}

fn layer(b: &mut Builder, name: &str, shape: &[i64]) -> (usize, usize) {
    let fan_in: i64 = shape[1..].iter().product();
    let init = Init::Uniform { bound: default_bound(fan_in) };
    (b.param(format!("{name}.weight"), shape, init), b.param(format!("{name}.bias"), &shape[..1], init))
}

impl MnistNet {
    pub fn new(b: &mut Builder) -> Self {
        MnistNet {
            c1: layer(b, "conv1", &[10, 1, 5, 5]),
            c2: layer(b, "conv2", &[20, 10, 5, 5]),
            f1: layer(b, "fc1", &[50, 320]),
            f2: layer(b, "fc2", &[10, 50]),
        }
    }
}

impl Network for MnistNet {
    fn forward(
        &self,
        p: &[Tensor],
        _buffers: &[Tensor],
        x: &Tensor,
        ctx: &Forward,
    ) -> Result<Tensor, super::ForwardError> {
        // libtorch's channels-last max-pool kernel, forward and backward, is much faster than
        // the planar one on these shapes: 4.6 -> 3.4 ms per 32-sample step on one thread,
        // copies included (BENCHMARKS.md).
        let pool = |t: Tensor| channels_last(&t).max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false);
        let h = pool(ctx.conv2d(x, &p[self.c1.0], &p[self.c1.1], 1, 0)).relu();
        let mut h = pool(ctx.conv2d(&h, &p[self.c2.0], &p[self.c2.1], 1, 0)).relu();
        if ctx.train {
            // Dropout2d zeroes whole channels: the mask is [n, 20, 1, 1], 0 or 1/(1-p) = 2 per
            // channel. A non-negative per-channel factor commutes with max-pool and ReLU, and
            // scaling by 0 or 2 is exact, so applying it here, on a quarter of the values, gives
            // bit for bit the reference program's dropout(conv2) -> max-pool -> ReLU.
            h = h.g_mul(&ctx.mask(0)); // not in place: autograd saved `h`
        }
        let n = h.size()[0];
        let mut h = ctx.linear(&h.reshape([n, 320]), &p[self.f1.0], &p[self.f1.1]).relu();
        if ctx.train {
            h = h.g_mul(&ctx.mask(1)); // not in place: autograd saved `h`
        }
        Ok(ctx.output(ctx.linear(&h, &p[self.f2.0], &p[self.f2.1])).log_softmax(-1, Kind::Float))
    }

    fn dropout_masks(&self, n: i64) -> Vec<(Vec<i64>, f64)> {
        vec![(vec![n, 20, 1, 1], 0.5), (vec![n, 50], 0.5)]
    }
}

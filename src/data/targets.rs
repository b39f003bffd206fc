//! Targets that are not class ids: a regression's values, a segmentation's masks, any array of
//! a fixed shape per sample, float or integer. A model that computes its own loss
//! (`forward(inputs, targets)`) trains on them; nothing counts classes or accuracy.

use tch::Tensor;

/// The values of every sample's target, row-major, one sample after another.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetValues {
    Floats(Vec<f32>),
    Ints(Vec<i64>),
}

/// The targets of a split: `len` samples of `shape` each.
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    pub values: TargetValues,
    /// One sample's shape (empty for a scalar per sample).
    pub shape: Vec<i64>,
}

impl Targets {
    /// Values per sample.
    fn per(&self) -> usize {
        self.shape.iter().product::<i64>().max(0) as usize
    }

    /// The samples held.
    pub fn len(&self) -> usize {
        let n = match &self.values {
            TargetValues::Floats(v) => v.len(),
            TargetValues::Ints(v) => v.len(),
        };
        n.checked_div(self.per()).unwrap_or(0)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The targets of the samples at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Targets {
        fn rows<T: Copy>(v: &[T], indices: &[usize], per: usize) -> Vec<T> {
            indices.iter().filter_map(|&i| v.get(i * per..(i + 1) * per)).flatten().copied().collect()
        }
        let per = self.per();
        let values = match &self.values {
            TargetValues::Floats(v) => TargetValues::Floats(rows(v, indices, per)),
            TargetValues::Ints(v) => TargetValues::Ints(rows(v, indices, per)),
        };
        Targets { values, shape: self.shape.clone() }
    }

    /// Keeps the first `n` samples.
    pub fn truncate(&mut self, n: usize) {
        let keep = n * self.per();
        match &mut self.values {
            TargetValues::Floats(v) => v.truncate(keep),
            TargetValues::Ints(v) => v.truncate(keep),
        }
    }

    /// All of them as one tensor `[len, shape…]` on the host (float32 or int64).
    pub fn tensor(&self) -> Tensor {
        let t = match &self.values {
            TargetValues::Floats(v) => Tensor::from_slice(v),
            TargetValues::Ints(v) => Tensor::from_slice(v),
        };
        let mut shape = vec![self.len() as i64];
        shape.extend(&self.shape);
        t.view(shape.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_selected_and_cut_whole() {
        let t =
            Targets { values: TargetValues::Floats((0..12).map(|v| v as f32).collect()), shape: vec![2, 2] };
        assert_eq!(t.len(), 3);
        let s = t.select(&[2, 0]);
        assert_eq!(s.values, TargetValues::Floats(vec![8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0]));
        assert_eq!(s.tensor().size(), vec![2, 2, 2]);
        let mut c = t.clone();
        c.truncate(1);
        assert_eq!((c.len(), c.tensor().size()), (1, vec![1, 2, 2]));
        let scalar = Targets { values: TargetValues::Ints(vec![4, 5]), shape: vec![] };
        assert_eq!((scalar.len(), scalar.tensor().size()), (2, vec![2]));
    }
}

//! One evaluation's figures over the whole evaluated set: loss and top-1 (the [`Tally`]), top-5
//! hits, and the confusion counts from which per-class accuracy follows.

use dpt_core::tally::Tally;

/// Figures summed over replicas and ranks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    pub sums: Tally,
    pub top5: f64,
    /// Row: the label, column: the prediction; `classes` × `classes`.
    pub confusion: Vec<f64>,
    pub classes: usize,
}

impl Evaluation {
    pub fn new(classes: usize) -> Self {
        Evaluation { sums: Tally::default(), top5: 0.0, confusion: vec![0.0; classes * classes], classes }
    }

    /// Adds one replica's figures; its confusion counts may be over another class count (the
    /// model's outputs), and land in the same cells.
    pub fn add(&mut self, sums: Tally, top5: f64, confusion: &[f64]) {
        self.sums.add(sums);
        self.top5 += top5;
        let c = (confusion.len() as f64).sqrt() as usize;
        for (i, v) in confusion.iter().enumerate().filter(|(_, v)| **v != 0.0) {
            let (row, col) = (i / c.max(1), i % c.max(1));
            if row < self.classes && col < self.classes {
                self.confusion[row * self.classes + col] += v;
            }
        }
    }

    /// The share of samples whose label is among the 5 highest outputs (`None` under 5 classes).
    pub fn top5_acc(&self) -> Option<f64> {
        (self.classes >= 5 && self.sums.samples > 0.0).then(|| self.top5 / self.sums.samples)
    }

    /// Each class's accuracy (`None` for a class without samples).
    pub fn per_class_acc(&self) -> Vec<Option<f64>> {
        let c = self.classes;
        (0..c)
            .map(|k| {
                let row = &self.confusion[k * c..(k + 1) * c];
                let n: f64 = row.iter().sum();
                (n > 0.0).then(|| row[k] / n)
            })
            .collect()
    }

    /// The confusion counts as rows (label) of columns (prediction).
    pub fn matrix(&self) -> Vec<Vec<u64>> {
        self.confusion.chunks(self.classes.max(1)).map(|r| r.iter().map(|v| *v as u64).collect()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_replicas_with_other_output_sizes_land_in_the_same_cells() {
        let mut e = Evaluation::new(2);
        // A 2-output replica: label 0 predicted 0 twice, label 1 predicted 0 once.
        e.add(Tally { samples: 3.0, correct: 2.0, ..Tally::default() }, 3.0, &[2.0, 0.0, 1.0, 0.0]);
        // A 3-output replica: label 1 predicted 1; its third class is outside the data's.
        e.add(
            Tally { samples: 1.0, correct: 1.0, ..Tally::default() },
            1.0,
            &[0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        );
        assert_eq!(e.matrix(), vec![vec![2, 0], vec![1, 1]]);
        assert_eq!(e.per_class_acc(), vec![Some(1.0), Some(0.5)]);
        assert_eq!(Evaluation::new(3).per_class_acc(), vec![None; 3]);
        assert_eq!(e.top5_acc(), None, "under 5 classes");
    }
}

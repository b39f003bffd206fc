//! Plain-text progress for pipes, CI and `--headless`: a line per report window, one per epoch,
//! and the seed's closing summary.

use std::io::Write;

use crate::engine::events::{Event, RunInfo};

/// Formats events as lines of text.
#[derive(Default)]
pub struct HeadlessPrinter {
    epochs: usize,
}

fn ms(seconds: f64) -> String {
    format!("{:.1}", seconds * 1e3)
}

/// `129068` → `129,068`.
pub fn thousands(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn device_list(devices: &[String]) -> String {
    format!("[{}]", devices.join(", "))
}

impl HeadlessPrinter {
    /// The line(s) for `event`, or `None` for events printed nowhere.
    pub fn format(&mut self, event: &Event) -> Option<String> {
        Some(match event {
            Event::Started(info) => {
                self.epochs = info.epochs;
                start_line(info)
            }
            Event::Step(s) => format!(
                "epoch {}/{} step {:>4}/{}  loss {:.4}  acc {:.3}  lr {}  {:.1} samples/s  step {} ms = data {} + fwd/bwd {} + allreduce {} + update {}",
                s.epoch,
                self.epochs,
                s.step,
                s.steps_per_epoch,
                s.loss,
                s.acc,
                s.lr,
                s.samples_per_sec,
                ms(s.timing.total()),
                ms(s.timing.data),
                ms(s.timing.compute),
                ms(s.timing.allreduce),
                ms(s.timing.update),
            ),
            Event::Epoch(e) => format!(
                "epoch {}/{} done: train loss {:.4}, train acc {:.3}, test loss {:.4}, test acc {:.3}, {:.1} sec (+{:.1} eval), {:.1} samples/sec",
                e.epoch, self.epochs, e.train_loss, e.train_acc, e.test_loss, e.test_acc, e.epoch_seconds, e.eval_seconds, e.samples_per_sec
            ),
            Event::LrChanged { from, to, global_step } => format!("lr {from} -> {to} at step {global_step}"),
            Event::Paused { global_step } => format!("paused at step {global_step}"),
            Event::Resumed { global_step } => format!("resumed at step {global_step}"),
            Event::StopRequested { global_step } => format!("stopping after step {global_step}"),
            Event::Saved { path, global_step } => format!("saved weights at step {global_step} to {path}"),
            Event::Checkpointed { path, global_step } => format!("checkpoint at step {global_step}: {path}"),
            Event::Restored { epoch, step, global_step, .. } => {
                format!("resumed from the checkpoint at epoch {} step {step} (step {global_step} in all)", epoch + 1)
            }
            Event::Refused { reason } => format!("refused: {reason}"),
            Event::Warning { message } => format!("warning: {message}"),
            Event::Failed { message, .. } => format!("training failed: {message}"),
            Event::Finished(s) => {
                let acc = s.test_acc.map_or("n/a".to_owned(), |a| format!("{a:.3}"));
                let spe = s.sec_per_epoch.map_or("n/a".to_owned(), |t| format!("{t:.1}"));
                format!(
                    "test acc: {acc}, {spe} sec/epoch on {}\nspeed: {:.1} samples/sec",
                    device_list(&s.devices),
                    s.samples_per_sec
                )
            }
        })
    }

    /// Prints `event` to `out`; errors of a closed pipe are ignored so training goes on.
    pub fn print(&mut self, event: &Event, out: &mut impl Write) {
        if let Some(line) = self.format(event) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

fn start_line(info: &RunInfo) -> String {
    format!(
        "dpt-tui: {} ({} parameters) on {} ({} replica(s), {} CPU thread(s) each), {} epochs x {} steps, batch {}, lr {}, momentum {}, weight decay {}, {} train / {} test samples",
        info.model,
        thousands(info.param_count),
        device_list(&info.devices),
        info.devices.len(),
        info.cpu_threads_per_replica,
        info.epochs,
        info.steps_per_epoch,
        info.batch_size,
        info.lr,
        info.momentum,
        info.weight_decay,
        info.train_samples,
        info.test_samples
    )
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn groups_digits() {
        assert_eq!(thousands(129_068), "129,068");
        assert_eq!(thousands(11_175_818), "11,175,818");
        assert_eq!(thousands(999), "999");
    }
}

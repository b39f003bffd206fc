//! The script as a child of `dpt-tui run`: started in a process group of its own with the
//! backend's address in its environment, its output copied line by line, its end reported, and
//! its exit status in words and as dpt-tui's.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use crossbeam_channel::{bounded, Receiver};

use dpt_core::monitor::MonitorMsg;
use dpt_tui::script::backend::Event;
use dpt_tui::signals;

/// The file in the run directory that keeps the script's output.
pub const OUTPUT_FILE: &str = "output.log";
/// The environment variables the client reads (docs/internals/script-protocol.md).
pub const ENDPOINT_VAR: &str = "DPT_TUI_ENDPOINT";
pub const RUN_DIR_VAR: &str = "DPT_TUI_RUN_DIR";
/// The most of one output line the log panel shows.
const OUTPUT_LINE_CHARS: usize = 400;

/// The script as a child of ours.
pub(super) struct Script {
    pub(super) id: u32,
    /// The exit status, once it ended.
    pub(super) status: Receiver<Option<ExitStatus>>,
}

impl Script {
    pub(super) fn wait(self) -> Option<ExitStatus> {
        self.status.recv().ok().flatten()
    }
}

/// Starts the script in a process group of its own (signals reach all of torchrun's processes),
/// its output into output.log and, without a dashboard, to ours; its end goes to the backend.
pub(super) fn start(
    program: &str,
    rest: &[String],
    (endpoint, run_dir): (&Path, &Path),
    terminal: bool,
    ended: crossbeam_channel::Sender<Event>,
    output: crossbeam_channel::Sender<MonitorMsg>,
) -> std::io::Result<Script> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(run_dir.join(OUTPUT_FILE))?;
    let mut child: Child = Command::new(program)
        .args(rest)
        .env(ENDPOINT_VAR, endpoint)
        .env(RUN_DIR_VAR, run_dir)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let id = child.id();
    let mut tees = Vec::new();
    if let Some(out) = child.stdout.take() {
        let echo = (!terminal).then(|| Box::new(std::io::stdout()) as Box<dyn Write + Send>);
        let (log, output) = (log.try_clone()?, output.clone());
        tees.push(
            std::thread::Builder::new()
                .name("dpt-script-out".into())
                .spawn(move || tee(out, log, echo, &output))?,
        );
    }
    if let Some(err) = child.stderr.take() {
        let echo = (!terminal).then(|| Box::new(std::io::stderr()) as Box<dyn Write + Send>);
        tees.push(
            std::thread::Builder::new()
                .name("dpt-script-err".into())
                .spawn(move || tee(err, log, echo, &output))?,
        );
    }
    let (tx, status) = bounded(1);
    std::thread::Builder::new().name("dpt-script-wait".into()).spawn(move || {
        let status = child.wait().ok();
        // Everything it wrote is in the log before its end is recorded.
        for t in tees {
            let _ = t.join();
        }
        let (status_words, ok) = match status {
            Some(s) => (words(s), s.success()),
            None => ("its status unknown".to_owned(), false),
        };
        let _ = ended.send(Event::Exited { status: status_words, ok });
        let _ = tx.send(status);
    })?;
    Ok(Script { id, status })
}

/// Copies the script's output line by line into the log, to `echo` and to the viewers' log
/// panel (a progress bar's redrawn line as its last state).
fn tee(
    from: impl Read,
    mut log: std::fs::File,
    mut echo: Option<Box<dyn Write + Send>>,
    viewers: &crossbeam_channel::Sender<MonitorMsg>,
) {
    let mut reader = BufReader::new(from);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        let _ = log.write_all(&line);
        if let Some(e) = &mut echo {
            let _ = e.write_all(&line).and_then(|()| e.flush());
        }
        let text = String::from_utf8_lossy(&line);
        let shown = text.trim_end().rsplit('\r').next().unwrap_or("");
        let shown: String = shown.chars().filter(|c| !c.is_control()).take(OUTPUT_LINE_CHARS).collect();
        if !shown.trim().is_empty() {
            let _ = viewers.send(MonitorMsg::Output { lines: vec![shown] });
        }
        line.clear();
    }
}

/// An exit status in words, as the record says it.
pub(super) fn words(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by {}", signals::name(s)),
        _ => status.to_string(),
    }
}

/// The script's exit status as dpt-tui's: its code, or 128 + the signal that killed it.
pub(super) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, Some(s)) => signals::exit_code(s),
        _ => 1,
    }
}

//! Drives the real binary in a pseudo-terminal and reads its screen through a VT100 emulator.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portable_pty::{native_pty_system, Child, CommandBuilder, ExitStatus, MasterPty, PtySize};

pub struct PtyRun {
    child: Box<dyn Child + Send + Sync>,
    /// The terminal's side of the user: `None` once hung up.
    writer: Option<Box<dyn Write + Send>>,
    screen: Arc<Mutex<vt100::Parser>>,
    bells: Arc<std::sync::atomic::AtomicUsize>,
    master: Option<Box<dyn MasterPty + Send>>,
    /// The thread reading the screen, and what stops it (before the terminal closes).
    reading: Option<(std::thread::JoinHandle<()>, Arc<AtomicBool>)>,
}

impl PtyRun {
    /// Starts `dpt-tui args` in a `cols`×`rows` terminal with a UTF-8 locale.
    pub fn spawn(args: &[&str], cols: u16, rows: u16, env: &[(&str, &str)]) -> PtyRun {
        let pair = native_pty_system()
            .openpty(PtySize { rows, cols, pixel_width: 0, pixel_height: 0 })
            .expect("a pseudo-terminal opens");
        let mut cmd = CommandBuilder::new(super::BIN);
        cmd.args(args);
        cmd.env("TERM", "xterm-256color");
        cmd.env("LANG", "C.UTF-8");
        cmd.env_remove("NO_COLOR");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).expect("the binary starts");
        drop(pair.slave);
        // Read through the master's own descriptor, polled, so that the terminal can be closed
        // (`hang_up`) with nothing else holding it open.
        let fd = pair.master.as_raw_fd().expect("a pty master's descriptor");
        let writer = pair.master.take_writer().expect("pty writer");
        let screen = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let parser = Arc::clone(&screen);
        let bells = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let rung = Arc::clone(&bells);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while !stopped.load(Ordering::SeqCst) {
                let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd; `fd` stays open until this thread is joined.
                let ready = unsafe { libc::poll(&mut poll, 1, 50) };
                if ready <= 0 {
                    continue;
                }
                // SAFETY: `buf` is writable for its length; `fd` is open (as above).
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                let n = n as usize;
                let bel = buf[..n].iter().filter(|&&b| b == 0x07).count();
                rung.fetch_add(bel, Ordering::SeqCst);
                parser.lock().unwrap().process(&buf[..n]);
            }
        });
        let reading = Some((thread, stop));
        PtyRun { child, writer: Some(writer), screen, bells, master: Some(pair.master), reading }
    }

    /// How many BEL bytes the program wrote so far.
    pub fn bells(&self) -> usize {
        self.bells.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.process_id().expect("a running child has a pid")
    }

    /// Types `text` into the terminal.
    pub fn send(&mut self, text: &str) {
        let writer = self.writer.as_mut().expect("a terminal not hung up");
        writer.write_all(text.as_bytes()).unwrap();
        writer.flush().unwrap();
    }

    /// Closes the terminal, as a dropped SSH connection does: the program reads the end of
    /// its input and gets SIGHUP.
    pub fn hang_up(&mut self) {
        if let Some((thread, stop)) = self.reading.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = thread.join();
        }
        self.writer = None;
        self.master = None;
    }

    /// What the screen shows now.
    pub fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// How many cells on screen have a foreground or background colour of their own.
    pub fn colored_cells(&self) -> usize {
        let parser = self.screen.lock().unwrap();
        let screen = parser.screen();
        let (rows, cols) = screen.size();
        (0..rows)
            .flat_map(|r| (0..cols).map(move |c| (r, c)))
            .filter_map(|(r, c)| screen.cell(r, c))
            .filter(|cell| cell.fgcolor() != vt100::Color::Default || cell.bgcolor() != vt100::Color::Default)
            .count()
    }

    /// Waits until the screen shows `needle`; panics with the screen after `timeout`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for_any(&[needle], timeout)
    }

    /// Waits until the screen shows one of `needles` (what a test expects, and what the
    /// program says instead when it goes wrong, to fail at once with it).
    pub fn wait_for_any(&mut self, needles: &[&str], timeout: Duration) -> String {
        self.wait_until(&format!("{needles:?}"), |screen| needles.iter().any(|n| screen.contains(n)), timeout)
    }

    /// Waits until the screen is as `shown` says (`what`, in words); panics with the screen
    /// after `timeout`.
    pub fn wait_until(&mut self, what: &str, shown: impl Fn(&str) -> bool, timeout: Duration) -> String {
        super::until(timeout, what, || {
            let screen = self.contents();
            if shown(&screen) {
                return Ok(screen);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("exited ({status:?}) before showing {what}; screen:\n{screen}");
            }
            Err(format!("screen:\n{screen}"))
        })
    }

    /// Waits for the process to end.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        // A process still running when the test fails is killed as the run is dropped.
        super::until(timeout, "exit", || match self.child.try_wait().unwrap() {
            Some(status) => Ok(status),
            None => Err(format!("still running; screen:\n{}", self.contents())),
        })
    }
}

impl Drop for PtyRun {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
    }
}

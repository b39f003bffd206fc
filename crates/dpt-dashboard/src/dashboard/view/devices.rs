//! One panel per device: utilization and memory gauges with a history line, temperature and
//! power where NVML gives them, and each replica's step time with the allreduce share.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::symbols::bar;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline};
use ratatui::Frame;

use super::{gib, Look};
use crate::dashboard::app::App;
use crate::dashboard::devices::DeviceState;
use crate::monitor::gpu::GpuDetail;
use crate::monitor::SampleSource;
use dpt_core::device::DeviceId;
use dpt_core::record::StateBytes;

const ASCII_BARS: bar::Set = bar::Set {
    full: "#",
    seven_eighths: "#",
    three_quarters: "=",
    five_eighths: "=",
    half: "-",
    three_eighths: "-",
    one_quarter: ".",
    one_eighth: ".",
    empty: " ",
};

pub fn draw(frame: &mut Frame, area: Rect, app: &App, look: &Look, compact: bool) {
    let t = look.theme;
    let fallback = app.devices.panels.iter().any(DeviceState::is_process_fallback);
    let title = match (fallback, compact) {
        (true, true) => "devices (process)".to_owned(),
        (true, false) => format!("devices {} process figures (no NVML)", look.sep()),
        (false, _) => "devices".to_owned(),
    };
    let block = look.panel(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if app.devices.panels.is_empty() || inner.height == 0 {
        return;
    }
    // Each device gets the rows its figures need; as many devices as fit are shown.
    let state = app.devices.state.as_ref().filter(|_| !compact);
    let heights: Vec<u16> =
        app.devices.panels.iter().map(|d| rows_needed(d, compact) + u16::from(state.is_some())).collect();
    let mut used = 0;
    let n = heights.iter().take_while(|h| {
        used += **h;
        used <= inner.height
    });
    let n = n.count().max(1);
    let rows = Layout::vertical(heights[..n].iter().map(|h| Constraint::Length(*h))).split(inner);
    for (d, row) in app.devices.panels.iter().zip(rows.iter()) {
        device(frame, *row, d, look, (compact, state));
    }
    if n < app.devices.panels.len() {
        let more = format!("+{} more devices: enlarge the terminal", app.devices.panels.len() - n);
        let y = inner.y + inner.height - 1;
        frame.render_widget(Paragraph::new(Span::styled(more, t.fg(t.dim))), Rect { y, height: 1, ..inner });
    }
}

/// The rows a device's panel needs: header, utilization, memory, the other figures, the
/// GPU's further lines, and the sparkline.
fn rows_needed(d: &DeviceState, compact: bool) -> u16 {
    let gpu = d.latest.as_ref().and_then(|s| s.gpu.as_deref());
    if compact {
        // What throttles a GPU is worth a row even here.
        return 4 + gpu.map_or(0, |g| u16::from(!g.slowing().is_empty()));
    }
    let extra = d.latest.as_ref().and_then(|s| s.gpu.as_deref()).map_or(0, |g| {
        2 + u16::from(!g.slowing().is_empty())
            + u16::from(g.processes.as_ref().is_some_and(|p| !p.is_empty()))
    });
    6 + extra
}

/// `held`: what each replica holds for the run, shown where there is room (not `compact`).
fn device(
    frame: &mut Frame,
    area: Rect,
    d: &DeviceState,
    look: &Look,
    (compact, held): (bool, Option<&StateBytes>),
) {
    let t = look.theme;
    let s = d.latest.as_ref();
    let fallback = d.is_process_fallback();
    let replicas: Vec<String> = d.replicas.iter().map(|r| format!("r{r}")).collect();
    let name = s.and_then(|s| s.name.clone()).map_or(String::new(), |n| format!(" {n}"));
    let place = match (d.rank, &d.host) {
        (Some(r), Some(h)) => format!("{h} rank {r} "),
        (Some(r), None) => format!("rank {r} "),
        _ => String::new(),
    };
    let mut header = vec![
        Span::styled(format!("{place}{}", d.device), t.title()),
        Span::styled(format!("{name} [{}]", replicas.join(",")), t.fg(t.dim)),
    ];
    if let Some(share) = d.allreduce_share {
        header.push(Span::styled(format!(" allreduce {:.0}%", share * 100.0), t.fg(t.dim)));
    }
    if let Some(note) = s.filter(|s| s.source == SampleSource::Nvml).and_then(|s| s.note.as_ref()) {
        header.push(Span::styled(format!(" ({note})"), t.fg(t.warning)));
    }
    let header = Line::from(header);
    if let Some(why) = s.filter(|s| s.source == SampleSource::Unavailable).and_then(|s| s.note.clone()) {
        // A GPU's figures or the reason they are missing; never the process's in their place.
        let mut lines = vec![
            header,
            Line::from(Span::styled(format!("GPU figures unavailable: {why}"), t.fg(t.warning))),
        ];
        if !d.replica_step.is_empty() {
            lines.push(Line::from(replica_spans(d, look, compact)));
        }
        frame.render_widget(Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: true }), area);
        return;
    }
    let bar_width = (area.width as usize).saturating_sub(20).max(4);
    let util_label = if fallback { "cpu " } else { "util" };
    let util = s.and_then(|s| s.util_pct);
    // Process CPU use can exceed 100% (several cores); the gauge shows it against all cores.
    let util_frac = util.map(|u| if fallback { u / (100.0 * cores()) } else { u / 100.0 });
    let (full, empty) = look.bar(util_frac.unwrap_or(0.0), bar_width);
    let util_line = Line::from(vec![
        Span::styled(format!("{util_label} "), t.fg(t.dim)),
        Span::styled(full, t.fg(t.util)),
        Span::styled(empty, t.fg(t.border)),
        Span::styled(util.map_or(" n/a".to_owned(), |u| format!(" {u:>4.0}%")), t.fg(t.text)),
    ]);
    let mem = s.and_then(|s| s.mem_used.zip(s.mem_total));
    let (full, empty) = look.bar(mem.map_or(0.0, |(u, tot)| u as f64 / tot.max(1) as f64), bar_width);
    let mem_label = if fallback { "rss " } else { "mem " };
    let mem_line = Line::from(vec![
        Span::styled(mem_label, t.fg(t.dim)),
        Span::styled(full, t.fg(t.memory)),
        Span::styled(empty, t.fg(t.border)),
        Span::styled(
            mem.map_or(" n/a".to_owned(), |(u, tot)| format!(" {}/{} GiB", gib(u), gib(tot))),
            t.fg(t.text),
        ),
    ]);
    let mut extra = Vec::new();
    if let Some(temp) = s.and_then(|s| s.temp_c) {
        extra.push(Span::styled(format!("{temp}{} ", if look.ascii { "C" } else { "°C" }), t.fg(t.text)));
    }
    if let Some(power) = s.and_then(|s| s.power_w) {
        extra.push(Span::styled(format!("{power:.0} W "), t.fg(t.text)));
    }
    extra.extend(replica_spans(d, look, compact));
    let mut lines = vec![header, util_line, mem_line];
    if let Some(h) = held {
        lines.push(held_line(h, d.replicas.len(), look));
    }
    lines.push(Line::from(extra));
    if let Some(g) = s.and_then(|s| s.gpu.as_deref()) {
        lines.extend(gpu_lines(g, d, look, compact));
    }
    if matches!(d.device, DeviceId::Cpu) && !compact && s.is_none() {
        lines.push(Line::from(Span::styled("waiting for the first sample", t.fg(t.dim))));
    }
    let text_rows = lines.len().min(area.height as usize) as u16;
    frame.render_widget(Paragraph::new(lines), Rect { height: text_rows, ..area });
    if !compact && area.height > text_rows + 1 {
        let history: Vec<u64> = d.util_history.iter().copied().collect();
        let width = area.width as usize;
        let start = history.len().saturating_sub(width);
        let spark = Sparkline::default()
            .data(&history[start..])
            .max(if fallback { (100.0 * cores()) as u64 } else { 100 })
            .style(t.fg(t.util))
            .bar_set(if look.ascii { ASCII_BARS } else { bar::NINE_LEVELS });
        frame.render_widget(spark, Rect { y: area.y + text_rows, height: 1, ..area });
    }
}

/// What each replica on the device holds for the whole run: weights (`w`), gradient sums (`g`)
/// and optimizer state (`opt`, its shard's under `--zero 1`, both shards under `--zero 2`); `xN` for N replicas.
fn held_line(h: &StateBytes, replicas: usize, look: &Look) -> Line<'static> {
    let t = look.theme;
    let shard = match (h.optimizer_shards, h.gradient_shards) {
        (0 | 1, _) => String::new(),
        (n, 0 | 1) => format!(" (1/{n} shard)"),
        (n, _) => format!(" (g+opt 1/{n})"),
    };
    let each = if replicas > 1 { format!(" x{replicas}") } else { String::new() };
    let (w, g, o) = (short(h.weights), short(h.gradients), short(h.optimizer));
    Line::from(vec![
        Span::styled("held ", t.fg(t.dim)),
        Span::styled(format!("w {w} g {g} opt {o}{shard}{each}"), t.fg(t.text)),
    ])
}

/// Bytes in few characters, as the process line gives them: `0.5M`, `475M`, `1.4G`.
fn short(bytes: u64) -> String {
    let mib = bytes as f64 / f64::from(1u32 << 20);
    match mib {
        m if m >= 1024.0 => format!("{}G", gib(bytes)),
        m if m >= 10.0 => format!("{m:.0}M"),
        m => format!("{m:.1}M"),
    }
}

/// A GPU's further figures: clocks, links, ECC and fan on one line (n/a where NVML gives
/// none), then what throttles it and who else is on it, when anything does or is.
fn gpu_lines(g: &GpuDetail, d: &DeviceState, look: &Look, compact: bool) -> Vec<Line<'static>> {
    let t = look.theme;
    let na = || "n/a".to_owned();
    let (up, down) = if look.ascii { ("tx ", "rx ") } else { ("↑", "↓") };
    let gbs = |kbs: Option<u32>| kbs.map_or_else(na, |v| format!("{:.1}", f64::from(v) / 1e6));
    let mut lines = Vec::new();
    if !compact {
        let clocks = format!(
            "SM {} fan {} ECC {}",
            g.sm_clock_mhz.map_or_else(na, |m| format!("{m} MHz")),
            g.fan_pct.map_or_else(na, |f| format!("{f}%")),
            g.ecc_uncorrected.map_or_else(na, |e| e.to_string())
        );
        let mut links = format!("PCIe {up}{} {down}{} GB/s", gbs(g.pcie_tx_kbs), gbs(g.pcie_rx_kbs));
        if let Some((tx, rx)) = d.nvlink_rate {
            links.push_str(&format!(" NVLink {up}{:.1} {down}{:.1} GB/s", tx / 1e9, rx / 1e9));
        }
        lines.push(Line::from(Span::styled(clocks, t.fg(t.text))));
        lines.push(Line::from(Span::styled(links, t.fg(t.text))));
    }
    let slowing = g.slowing();
    if !slowing.is_empty() {
        lines.push(Line::from(Span::styled(format!("throttled: {}", slowing.join(", ")), t.fg(t.warning))));
    }
    if let Some(procs) = g.processes.as_ref().filter(|p| !p.is_empty() && !compact) {
        let mut spans = vec![Span::styled("procs ", t.fg(t.dim))];
        for p in procs {
            let text = format!(
                "{}{} {} {}G  ",
                p.pid,
                if p.ours { "*" } else { "" },
                p.name.as_deref().unwrap_or("?"),
                p.mem.map_or_else(na, gib)
            );
            let unmatched = g.pids == crate::monitor::gpu::PidMatch::Unmatched;
            spans.push(Span::styled(text, t.fg(if p.ours || unmatched { t.text } else { t.warning })));
        }
        if g.pids == crate::monitor::gpu::PidMatch::Unmatched {
            spans.push(Span::styled("(host pids: this run is one of them)", t.fg(t.dim)));
        }
        lines.push(Line::from(spans));
    }
    lines
}

/// Each replica's step time on this device and the share of the step it waits for the slowest;
/// a straggler's in the warning colour, marked slow (the wait left out of the compact layout).
fn replica_spans(d: &DeviceState, look: &Look, compact: bool) -> Vec<Span<'static>> {
    let t = look.theme;
    d.replica_step
        .iter()
        .map(|(r, secs, wait)| {
            // The wait is shown where it is worth a glance (1 % or more of the step).
            let wait =
                if *wait >= 0.01 && !compact { format!(" wait {:.0}%", wait * 100.0) } else { String::new() };
            if d.slow.contains(r) {
                Span::styled(format!("r{r} {:.1} ms slow ", secs * 1e3), t.fg(t.warning))
            } else {
                Span::styled(format!("r{r} {:.1} ms{wait} ", secs * 1e3), t.fg(t.text))
            }
        })
        .collect()
}

fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

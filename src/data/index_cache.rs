//! The listing of an image folder or of WebDataset shards (every image's file or place in its
//! shard, and its class), kept between runs: listing 1.28 M files, or reading the headers of
//! every shard, takes minutes on a network file system, and a run that starts again (a
//! requeued job, the next experiment) should start at once. The cache is a text file under
//! `$XDG_CACHE_HOME/dpt-tui/index/` (else `~/.cache/...`), valid while the folders' entries are
//! unchanged: the split folders and everything directly in them (class folders, shards) keep
//! their names, sizes and modification times (adding or removing an image changes its class
//! folder's). Data sets of fewer than 20,000 images list at once and are not cached. Listing a
//! large data set without a cache says how far it has got on stderr.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::dataset::DataError;
use super::folder::{ImageSource, Labelled};

/// A data set's listing: its splits and, for an image folder, its class names.
pub(super) struct Listing {
    pub train: Labelled,
    pub test: Labelled,
    pub val: Option<Labelled>,
    pub test_is_val: bool,
    pub classes: Option<Vec<String>>,
}

const HEADER: &str = "dpt-tui index 1";

/// The fewest images whose listing is cached.
pub const CACHED_FROM: usize = 20_000;

/// dpt-tui's cache folder: `$XDG_CACHE_HOME/dpt-tui`, else `~/.cache/dpt-tui`.
pub fn cache_base() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("dpt-tui"))
}

/// Where the cache files live.
fn cache_dir() -> Option<PathBuf> {
    Some(cache_base()?.join("index"))
}

/// FNV-1a: a hash that stays the same from one build to the next (names the cache files).
pub fn fnv(data: impl AsRef<[u8]>) -> u64 {
    data.as_ref()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// What the listing of `dir` depends on: the split folders and their entries, by name, kind,
/// size and modification time.
fn fingerprint(dir: &Path, kind: &str) -> String {
    let mut out = format!("{kind} {}\n", dir.display());
    let stamp = |m: &std::fs::Metadata| {
        m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default()
    };
    for split in ["train", "val", "test"] {
        let Ok(meta) = std::fs::metadata(dir.join(split)) else { continue };
        let _ = writeln!(out, "{split} {:?}", stamp(&meta));
        let mut entries: Vec<String> = std::fs::read_dir(dir.join(split))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some(format!("{:?} {} {} {:?}", e.file_name(), m.is_dir(), m.len(), stamp(&m)))
            })
            .collect();
        entries.sort();
        out.push_str(&entries.join("\n"));
        out.push('\n');
    }
    out
}

/// The listing of `dir` (`kind`: the format's name): from the cache when it is still valid
/// (and `true`), else from `list`, then cached for the next run.
pub(super) fn cached(
    dir: &Path,
    kind: &str,
    list: impl FnOnce(&mut Progress) -> Result<Listing, DataError>,
) -> Result<(Listing, bool), DataError> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let print = fingerprint(&dir, kind);
    let file = cache_dir().map(|c| c.join(format!("{:016x}.tsv", fnv(format!("{kind} {}", dir.display())))));
    if let Some(listing) = file.as_deref().and_then(|f| read(f, &print)) {
        return Ok((listing, true));
    }
    let mut progress = Progress::new(&dir);
    let listing = list(&mut progress)?;
    progress.done();
    // Small data sets list at once: their listings are not worth a file in the user's cache.
    if let Some(f) = file.filter(|_| progress.count >= CACHED_FROM) {
        // A cache that cannot be written costs the next run the listing, nothing more.
        let _ = write(&f, &print, &listing);
    }
    Ok((listing, false))
}

/// Says on stderr how far a long listing has got, every few seconds.
pub(super) struct Progress {
    dir: PathBuf,
    started: Instant,
    last: Instant,
    count: usize,
    said: bool,
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(3);

    fn new(dir: &Path) -> Progress {
        let now = Instant::now();
        Progress { dir: dir.to_owned(), started: now, last: now, count: 0, said: false }
    }

    /// `n` more images listed.
    pub fn add(&mut self, n: usize) {
        self.count += n;
        if self.last.elapsed() >= Self::EVERY {
            self.last = Instant::now();
            self.said = true;
            eprintln!("dpt-tui: indexing {}: {} images so far", self.dir.display(), self.count);
        }
    }

    fn done(&self) {
        if self.said {
            eprintln!(
                "dpt-tui: indexed {} images in {} in {:.0} s; the next run reads the index from the cache",
                self.count,
                self.dir.display(),
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

fn write(file: &Path, print: &str, listing: &Listing) -> std::io::Result<()> {
    let mut out = format!("{HEADER}\n{:016x}\n", fnv(print));
    let classes = listing.classes.as_ref().map(|c| c.join("\t"));
    let _ = writeln!(out, "classes\t{}\t{}", u8::from(classes.is_some()), classes.unwrap_or_default());
    let _ = writeln!(out, "test_is_val\t{}", u8::from(listing.test_is_val));
    let splits =
        [("train", Some(&listing.train)), ("test", Some(&listing.test)), ("val", listing.val.as_ref())];
    for (name, split) in splits {
        let Some(split) = split else { continue };
        let _ = writeln!(out, "split\t{name}\t{}", split.len());
        for (source, label) in split {
            let line = match source {
                ImageSource::File(p) => format!("{label}\tf\t{}", p.display()),
                ImageSource::Member { shard, member, offset, len } => {
                    format!("{label}\tm\t{offset}\t{len}\t{}\t{member}", shard.display())
                }
            };
            // A name the format cannot hold: no cache rather than a wrong one.
            if line.contains('\n') || line.matches('\t').count() != if line.contains("\tm\t") { 5 } else { 2 }
            {
                return Ok(());
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new(".")))?;
    crate::atomic::write_bytes(file, out.as_bytes())
}

fn read(file: &Path, print: &str) -> Option<Listing> {
    let text = std::fs::read_to_string(file).ok()?;
    let mut lines = text.lines();
    if lines.next()? != HEADER || lines.next()? != format!("{:016x}", fnv(print)) {
        return None;
    }
    let classes_line = lines.next()?.strip_prefix("classes\t")?;
    let classes = match classes_line.split_once('\t')? {
        ("1", names) => Some(names.split('\t').map(str::to_owned).collect()),
        _ => None,
    };
    let test_is_val = lines.next()?.strip_prefix("test_is_val\t")? == "1";
    let (mut train, mut test, mut val) = (None, None, None);
    while let Some(head) = lines.next() {
        let mut parts = head.split('\t');
        let (Some("split"), Some(name), Some(n)) = (parts.next(), parts.next(), parts.next()) else {
            return None;
        };
        let n: usize = n.parse().ok()?;
        let mut split = Vec::with_capacity(n);
        for _ in 0..n {
            let mut f = lines.next()?.splitn(6, '\t');
            let label: i64 = f.next()?.parse().ok()?;
            let source = match f.next()? {
                "f" => ImageSource::File(PathBuf::from(f.next()?)),
                "m" => {
                    let (offset, len) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?);
                    let shard = PathBuf::from(f.next()?);
                    ImageSource::Member { shard, member: f.next()?.to_owned(), offset, len }
                }
                _ => return None,
            };
            split.push((source, label));
        }
        match name {
            "train" => train = Some(split),
            "test" => test = Some(split),
            "val" => val = Some(split),
            _ => return None,
        }
    }
    Some(Listing { train: train?, test: test?, val, test_is_val, classes })
}

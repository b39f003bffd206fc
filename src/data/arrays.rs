//! Arrays: `x_train`, `y_train`, `x_test`, `y_test` in a NumPy `.npz` file, as `.npy` files in
//! a folder, or in a `.safetensors` file. Images are `[N, H, W]` (one channel), `[N, C, H, W]`
//! or `[N, H, W, C]` (C of 1, 3 or 4, as NumPy and Keras data sets store them), uint8 (kept as
//! bytes) or float32/float64 (kept as floats); labels are `[N]` or `[N, 1]` integers (class
//! ids), and any other `y` (floats of any shape, integers of several values per sample) holds
//! targets for a model that computes its own loss (`super::targets`).

use std::path::Path;

use npyz::{NpyFile, TypeChar};

use super::dataset::{DataError, Dataset, Pixels, Split};
use super::format::{DataFormat, LoadOptions};
use super::stream::{RowSplit, Rows};
use super::targets::{TargetValues, Targets};

/// An array as read, before it becomes images or labels.
enum Values {
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
}

struct Array {
    name: String,
    shape: Vec<u64>,
    values: Values,
}

fn npy_values<R: std::io::Read>(file: NpyFile<R>, path: &Path, name: &str) -> Result<Array, DataError> {
    let read_error =
        |e: std::io::Error| DataError::Read { path: path.to_owned(), why: format!("{name}: {e}") };
    let shape = file.shape().to_vec();
    if file.order() == npyz::Order::Fortran {
        return Err(DataError::ArrayShape {
            path: path.to_owned(),
            name: name.to_owned(),
            shape,
            expected: "it is stored in Fortran order; save it with np.ascontiguousarray",
        });
    }
    let dtype = file.dtype();
    let type_str = match &dtype {
        npyz::DType::Plain(t) => t.clone(),
        other => {
            return Err(DataError::ArrayType {
                path: path.to_owned(),
                name: name.to_owned(),
                dtype: other.descr(),
            })
        }
    };
    let values = match (type_str.type_char(), type_str.size_field()) {
        (TypeChar::Uint, 1) => Values::Bytes(file.into_vec::<u8>().map_err(read_error)?),
        (TypeChar::Float, 4) => Values::Floats(file.into_vec::<f32>().map_err(read_error)?),
        (TypeChar::Float, 8) => Values::Floats(
            file.into_vec::<f64>().map_err(read_error)?.into_iter().map(|v| v as f32).collect(),
        ),
        (TypeChar::Int, 1) => {
            Values::Ints(file.into_vec::<i8>().map_err(read_error)?.into_iter().map(i64::from).collect())
        }
        (TypeChar::Int, 2) => {
            Values::Ints(file.into_vec::<i16>().map_err(read_error)?.into_iter().map(i64::from).collect())
        }
        (TypeChar::Int, 4) => {
            Values::Ints(file.into_vec::<i32>().map_err(read_error)?.into_iter().map(i64::from).collect())
        }
        (TypeChar::Int, 8) => Values::Ints(file.into_vec::<i64>().map_err(read_error)?),
        (TypeChar::Uint, 2) => {
            Values::Ints(file.into_vec::<u16>().map_err(read_error)?.into_iter().map(i64::from).collect())
        }
        (TypeChar::Uint, 4) => {
            Values::Ints(file.into_vec::<u32>().map_err(read_error)?.into_iter().map(i64::from).collect())
        }
        _ => {
            return Err(DataError::ArrayType {
                path: path.to_owned(),
                name: name.to_owned(),
                dtype: type_str.to_string(),
            })
        }
    };
    Ok(Array { name: name.to_owned(), shape, values })
}

const NAMES: [&str; 4] = ["x_train", "y_train", "x_test", "y_test"];

fn read_npz(path: &Path) -> Result<Vec<Array>, DataError> {
    let io = |e: std::io::Error| DataError::Read { path: path.to_owned(), why: e.to_string() };
    let mut archive = npyz::npz::NpzArchive::open(path).map_err(io)?;
    let mut out = Vec::new();
    for name in NAMES {
        let file = archive
            .by_name(name)
            .map_err(io)?
            .ok_or_else(|| DataError::ArrayMissing { path: path.to_owned(), name: name.to_owned() })?;
        out.push(npy_values(file, path, name)?);
    }
    Ok(out)
}

fn read_npy_dir(dir: &Path) -> Result<Vec<Array>, DataError> {
    NAMES
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.npy"));
            if !path.is_file() {
                return Err(DataError::ArrayMissing { path: dir.to_owned(), name: format!("{name}.npy") });
            }
            let bytes = std::fs::read(&path)
                .map_err(|e| DataError::Read { path: path.clone(), why: e.to_string() })?;
            let file = NpyFile::new(bytes.as_slice())
                .map_err(|e| DataError::Read { path: path.clone(), why: e.to_string() })?;
            npy_values(file, &path, name)
        })
        .collect()
}

fn read_safetensors(path: &Path) -> Result<Vec<Array>, DataError> {
    use safetensors::Dtype;
    let bytes =
        std::fs::read(path).map_err(|e| DataError::Read { path: path.to_owned(), why: e.to_string() })?;
    let file = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| DataError::Read {
        path: path.to_owned(),
        why: format!("not a safetensors file ({e:?})"),
    })?;
    NAMES
        .iter()
        .map(|name| {
            let view = file
                .tensor(name)
                .map_err(|_| DataError::ArrayMissing { path: path.to_owned(), name: (*name).to_owned() })?;
            let data = view.data();
            let le = |n: usize| data.chunks_exact(n);
            let values = match view.dtype() {
                Dtype::U8 => Values::Bytes(data.to_vec()),
                Dtype::F32 => {
                    Values::Floats(le(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
                }
                Dtype::F64 => Values::Floats(
                    le(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32).collect(),
                ),
                Dtype::I64 => {
                    Values::Ints(le(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect())
                }
                Dtype::I32 => Values::Ints(
                    le(4).map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect(),
                ),
                Dtype::I16 => {
                    Values::Ints(le(2).map(|b| i64::from(i16::from_le_bytes([b[0], b[1]]))).collect())
                }
                Dtype::I8 => Values::Ints(data.iter().map(|&b| i64::from(b as i8)).collect()),
                other => {
                    return Err(DataError::ArrayType {
                        path: path.to_owned(),
                        name: (*name).to_owned(),
                        dtype: format!("{other:?}"),
                    })
                }
            };
            Ok(Array {
                name: (*name).to_owned(),
                shape: view.shape().iter().map(|&d| d as u64).collect(),
                values,
            })
        })
        .collect()
}

/// `(n, c, h, w, channels_last)` of an image array of `shape` (`[n, h, w]`, `[n, c, h, w]` or
/// `[n, h, w, c]`, C of 1, 3 or 4).
fn layout(name: &str, shape: &[u64], path: &Path) -> Result<(usize, usize, usize, usize, bool), DataError> {
    let bad = || DataError::ArrayShape {
        path: path.to_owned(),
        name: name.to_owned(),
        shape: shape.to_vec(),
        expected: "images must be [N, H, W], [N, C, H, W] or [N, H, W, C] with C of 1, 3 or 4",
    };
    let small = |d: usize| matches!(d, 1 | 3 | 4);
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let found = match dims.as_slice() {
        [n, h, w] => (*n, 1, *h, *w, false),
        [n, c, h, w] if small(*c) && !small(*w) => (*n, *c, *h, *w, false),
        [n, h, w, c] if small(*c) => (*n, *c, *h, *w, true),
        _ => return Err(bad()),
    };
    if found.2 == 0 || found.3 == 0 {
        return Err(bad());
    }
    Ok(found)
}

/// NCHW planes from `[n, h, w]`, `[n, c, h, w]` or `[n, h, w, c]` values.
fn images(a: Array, path: &Path) -> Result<(Pixels, usize, usize, usize, usize), DataError> {
    let (n, c, h, w, channels_last) = layout(&a.name, &a.shape, path)?;
    fn planar<T: Copy>(v: Vec<T>, n: usize, c: usize, hw: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(v.len());
        for s in 0..n {
            let sample = &v[s * hw * c..(s + 1) * hw * c];
            for ch in 0..c {
                out.extend(sample.iter().skip(ch).step_by(c).copied());
            }
        }
        out
    }
    let pixels = match a.values {
        Values::Bytes(v) if channels_last && c > 1 => Pixels::Bytes(planar(v, n, c, h * w)),
        Values::Bytes(v) => Pixels::Bytes(v),
        Values::Floats(v) if channels_last && c > 1 => Pixels::Floats(planar(v, n, c, h * w)),
        Values::Floats(v) => Pixels::Floats(v),
        Values::Ints(_) => {
            return Err(DataError::ArrayType {
                path: path.to_owned(),
                name: a.name,
                dtype: "an integer type other than uint8".into(),
            })
        }
    };
    Ok((pixels, n, c, h, w))
}

fn labels(a: Array, path: &Path) -> Result<Vec<i64>, DataError> {
    let ok_shape = matches!(a.shape.as_slice(), [_] | [_, 1]);
    if !ok_shape {
        return Err(DataError::ArrayShape {
            path: path.to_owned(),
            name: a.name,
            shape: a.shape,
            expected: "labels must be [N] or [N, 1]",
        });
    }
    match a.values {
        Values::Ints(v) => Ok(v),
        Values::Bytes(v) => Ok(v.into_iter().map(i64::from).collect()),
        Values::Floats(_) => {
            Err(DataError::ArrayType { path: path.to_owned(), name: a.name, dtype: "float".into() })
        }
    }
}

/// Whether `a` holds class ids: integers, `[N]` or `[N, 1]`.
fn holds_labels(a: &Array) -> bool {
    matches!(a.shape.as_slice(), [_] | [_, 1]) && !matches!(a.values, Values::Floats(_))
}

/// `a` as targets that are not class ids: floats of any shape, integers of more than one
/// value per sample.
fn targets(a: Array) -> Targets {
    let shape = a.shape.iter().skip(1).map(|&d| d as i64).collect();
    let values = match a.values {
        Values::Floats(v) => TargetValues::Floats(v),
        Values::Ints(v) => TargetValues::Ints(v),
        Values::Bytes(v) => TargetValues::Ints(v.into_iter().map(i64::from).collect()),
    };
    Targets { values, shape }
}

fn split(x: Array, y: Array, path: &Path) -> Result<Split, DataError> {
    let (xn, yn) = (x.name.clone(), y.name.clone());
    let (images, n, channels, rows, cols) = images(x, path)?;
    let (labels, targets) = match holds_labels(&y) {
        true => (labels(y, path)?, None),
        false => (Vec::new(), Some(targets(y))),
    };
    let count = targets.as_ref().map_or(labels.len(), Targets::len);
    if count != n {
        return Err(DataError::ArrayCounts {
            path: path.to_owned(),
            images: xn,
            n_images: n,
            labels: yn,
            n_labels: count,
        });
    }
    Ok(Split { images, labels, channels, rows, cols, targets })
}

/// A reader that counts the bytes read through it (where an `.npy` file's data begins).
struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// The uint8 image array `dir/<name>.npy` left in its file: its shape and where its data begins
/// (`None`: not uint8 in C order, read whole instead).
fn npy_in_place(dir: &Path, name: &str) -> Result<Option<(Vec<u64>, u64)>, DataError> {
    let path = dir.join(format!("{name}.npy"));
    let io = |e: std::io::Error| DataError::Read { path: path.clone(), why: e.to_string() };
    let file = std::fs::File::open(&path).map_err(io)?;
    let mut counting = Counting { inner: file, read: 0 };
    let npy = NpyFile::new(&mut counting).map_err(io)?;
    let bytes = matches!(npy.dtype(), npyz::DType::Plain(t) if (t.type_char(), t.size_field()) == (TypeChar::Uint, 1));
    if !bytes || npy.order() == npyz::Order::Fortran {
        return Ok(None);
    }
    let shape = npy.shape().to_vec();
    drop(npy);
    Ok(Some((shape, counting.read)))
}

/// A folder of `.npy` files whose uint8 images are streamed (`--loader stream`, or auto when
/// they do not fit `--data-memory`): each sample read from its row in the file as training
/// reaches it; the labels read whole. `None`: read everything instead.
fn streamed_npy_dir(dir: &Path, options: LoadOptions) -> Result<Option<Dataset>, DataError> {
    let (Some(train), Some(test)) = (npy_in_place(dir, "x_train")?, npy_in_place(dir, "x_test")?) else {
        return Ok(None);
    };
    let decoded: u64 = [&train.0, &test.0].iter().map(|s| s.iter().product::<u64>()).sum();
    if !options.loader.streams(decoded, options.memory) {
        return Ok(None);
    }
    let mut rows = Rows::default();
    let mut splits = Vec::new();
    for ((shape, data_at), (x, y)) in
        [train, test].into_iter().zip([("x_train", "y_train"), ("x_test", "y_test")])
    {
        let (n, c, h, w, channels_last) = layout(x, &shape, dir)?;
        let per = (c * h * w) as u64;
        let len = u32::try_from(per).map_err(|_| DataError::ArrayShape {
            path: dir.to_owned(),
            name: x.to_owned(),
            shape: shape.clone(),
            expected: "a sample is over 4 GiB",
        })?;
        let entries = rows.entries(&dir.join(format!("{x}.npy")), (data_at, per), len, n);
        let label_path = dir.join(format!("{y}.npy"));
        let bytes = std::fs::read(&label_path)
            .map_err(|e| DataError::Read { path: label_path.clone(), why: e.to_string() })?;
        let npy = NpyFile::new(bytes.as_slice())
            .map_err(|e| DataError::Read { path: label_path.clone(), why: e.to_string() })?;
        let y_values = npy_values(npy, &label_path, y)?;
        if !holds_labels(&y_values) {
            // Targets that are not class ids load with the images, in memory.
            return Ok(None);
        }
        let labels = labels(y_values, dir)?;
        if labels.len() != n {
            return Err(DataError::ArrayCounts {
                path: dir.to_owned(),
                images: x.to_owned(),
                n_images: n,
                labels: y.to_owned(),
                n_labels: labels.len(),
            });
        }
        splits.push(RowSplit { entries, labels, shape: (c, h, w), channels_last });
    }
    let test = splits.pop().ok_or(DataError::Unknown { path: dir.to_owned() })?;
    let train = splits.pop().ok_or(DataError::Unknown { path: dir.to_owned() })?;
    let [train, test] = rows.splits([train, test]);
    let source = format!("NumPy arrays in {} (streamed)", dir.display());
    super::format::finish(train, test, source, dir).map(Some)
}

/// Loads the four arrays from `path` (`format`: NumPy or safetensors); a folder of `.npy`
/// files with uint8 images streams them when `options` say so.
pub fn load(path: &Path, format: DataFormat, options: LoadOptions) -> Result<Dataset, DataError> {
    if format == DataFormat::Npy && path.is_dir() {
        if let Some(data) = streamed_npy_dir(path, options)? {
            return Ok(data);
        }
    }
    let arrays = match format {
        DataFormat::Safetensors => read_safetensors(path)?,
        _ if path.is_dir() => read_npy_dir(path)?,
        _ => read_npz(path)?,
    };
    let mut it = arrays.into_iter();
    let mut next = || it.next().ok_or_else(|| DataError::Unknown { path: path.to_owned() });
    let (xtr, ytr, xte, yte) = (next()?, next()?, next()?, next()?);
    let train = split(xtr, ytr, path)?;
    let test = split(xte, yte, path)?;
    let target_kind = |s: &Split| match &s.targets {
        None => "class ids".to_owned(),
        Some(t) => {
            let kind = if matches!(t.values, TargetValues::Floats(_)) { "float" } else { "integer" };
            format!("{kind} targets of shape {:?} per sample", t.shape)
        }
    };
    if target_kind(&train) != target_kind(&test) {
        let (train, test) = (target_kind(&train), target_kind(&test));
        return Err(DataError::TargetKinds { path: path.to_owned(), train, test });
    }
    let kind = if format == DataFormat::Safetensors { "safetensors" } else { "NumPy" };
    let targets = if train.targets.is_some() { format!(" ({})", target_kind(&train)) } else { String::new() };
    super::format::finish(train, test, format!("{kind} arrays in {}{targets}", path.display()), path)
}

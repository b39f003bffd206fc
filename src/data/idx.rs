//! Reader for the IDX format of MNIST and Fashion-MNIST (gzip-compressed or raw; a raw file's
//! header alone, for data read in place).
//!
//! The format: two zero bytes, a type byte (0x08 = unsigned byte), the number of dimensions, one
//! big-endian `u32` per dimension, then the data in row-major order. Everything a corrupt or
//! truncated download can get wrong is checked before any allocation sized by the header.

use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use thiserror::Error;

/// What can go wrong while reading one IDX file.
#[derive(Debug, Error)]
pub enum IdxError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("{path} is a corrupt or truncated gzip file (download or reinstall it)")]
    Gzip {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("{path} is not an IDX file: magic number {found:#010x}, expected {expected:#010x}; check that it is the right file")]
    BadMagic { path: PathBuf, found: u32, expected: u32 },
    #[error("{path} is truncated: the header announces {expected} bytes of data but {found} are there; download or reinstall it")]
    Truncated { path: PathBuf, expected: u64, found: u64 },
    #[error("{path} has {found} trailing bytes after the announced data; the file is corrupt, download or reinstall it")]
    TrailingBytes { path: PathBuf, found: u64 },
    #[error("{path} has shape {found:?}, expected {expected}; check that images and labels are not swapped")]
    BadShape { path: PathBuf, found: Vec<u32>, expected: &'static str },
}

/// One decoded IDX file of unsigned bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxArray {
    pub dims: Vec<u32>,
    pub data: Vec<u8>,
}

const TYPE_U8: u8 = 0x08;

/// Reads `path`, decompressing it when it starts with the gzip magic bytes.
pub fn read_idx_file(path: &Path) -> Result<IdxArray, IdxError> {
    let raw = std::fs::read(path).map_err(|cause| IdxError::Io { path: path.to_owned(), cause })?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        GzDecoder::new(raw.as_slice())
            .read_to_end(&mut out)
            .map_err(|cause| IdxError::Gzip { path: path.to_owned(), cause })?;
        out
    } else {
        raw
    };
    parse_idx(&bytes, path)
}

/// Parses an uncompressed IDX byte buffer; `path` only names the file in errors.
pub fn parse_idx(bytes: &[u8], path: &Path) -> Result<IdxArray, IdxError> {
    let (dims, header) = parse_header(bytes, path)?;
    check_len(&dims, (bytes.len() - header) as u64, path)?;
    Ok(IdxArray { dims, data: bytes[header..].to_vec() })
}

/// An uncompressed IDX file's dimensions and where its data begins, its length checked against
/// them, without reading the data; `None` for a gzip file (whose data cannot be read in place).
pub fn header_in_place(path: &Path) -> Result<Option<(Vec<u32>, u64)>, IdxError> {
    let io = |cause| IdxError::Io { path: path.to_owned(), cause };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut head = Vec::with_capacity(20);
    file.by_ref().take(20).read_to_end(&mut head).map_err(io)?;
    if head.starts_with(&[0x1f, 0x8b]) {
        return Ok(None);
    }
    let (dims, header) = parse_header(&head, path)?;
    check_len(&dims, len.saturating_sub(header as u64), path)?;
    Ok(Some((dims, header as u64)))
}

/// The magic number and dimensions at the start of `bytes`: `(dims, header length)`.
fn parse_header(bytes: &[u8], path: &Path) -> Result<(Vec<u32>, usize), IdxError> {
    let truncated =
        |expected: u64| IdxError::Truncated { path: path.to_owned(), expected, found: bytes.len() as u64 };
    if bytes.len() < 4 {
        return Err(truncated(4));
    }
    let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let ndims = bytes[3];
    if bytes[0] != 0 || bytes[1] != 0 || bytes[2] != TYPE_U8 || ndims == 0 || ndims > 4 {
        // Name the most likely expected magic for the file at hand.
        let expected = 0x0000_0800 | u32::from(ndims.clamp(1, 3));
        return Err(IdxError::BadMagic { path: path.to_owned(), found: magic, expected });
    }
    let header = 4 + 4 * usize::from(ndims);
    if bytes.len() < header {
        return Err(truncated(header as u64));
    }
    let dims =
        bytes[4..header].chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok((dims, header))
}

/// `found` bytes of data where `dims` announce theirs: too few or too many is a corrupt file.
fn check_len(dims: &[u32], found: u64, path: &Path) -> Result<(), IdxError> {
    // Announced sizes beyond u64 (three dimensions of 2^32) are as truncated as any file can be.
    let expected = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(u64::from(d))).unwrap_or(u64::MAX);
    if found < expected {
        return Err(IdxError::Truncated { path: path.to_owned(), expected, found });
    }
    if found > expected {
        return Err(IdxError::TrailingBytes { path: path.to_owned(), found: found - expected });
    }
    Ok(())
}

/// Encodes `data` with `dims` as an uncompressed IDX buffer (used to write test fixtures).
pub fn encode_idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, TYPE_U8, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

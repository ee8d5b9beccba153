//! Reading and writing golden files: safetensors with string metadata, validated. They
//! are read through the checkpoint crate's safetensors layer ([`Shard`]); the writer
//! keeps its own byte-stable layout (header keys sorted, tensors in name order, no
//! alignment padding between them), so that the same case always gives the same bytes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use blockscale_checkpoint::{CheckpointError, Shard, TensorEntry};
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use crate::GoldenError;

/// Version of the golden file layout (tensor names, metadata keys). Bumped when they
/// change; files of another version are refused.
pub const FORMAT_VERSION: &str = "1";

/// The blockscale version that wrote the files this build expects.
pub const BLOCKSCALE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A golden file, read whole and checked: parses as safetensors (so not truncated), and
/// was written for this golden format and blockscale version.
pub struct GoldenFile {
    path: PathBuf,
    shard: Shard,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for GoldenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoldenFile").field("path", &self.path).field("tensors", &self.by_name.len()).finish()
    }
}

impl GoldenFile {
    /// Reads and validates `path`.
    ///
    /// # Errors
    /// [`GoldenError::Io`], [`GoldenError::Format`] (not safetensors, truncated header or
    /// data), [`GoldenError::Metadata`] (no version keys), [`GoldenError::Version`].
    pub fn open(path: &Path) -> Result<Self, GoldenError> {
        let bytes = std::fs::read(path).map_err(|source| GoldenError::Io { path: path.into(), source })?;
        Self::from_bytes(path, bytes)
    }

    /// Validates a golden file already read into memory, as [`GoldenFile::open`] does;
    /// `path` names it in errors (the fuzz target reads its input this way).
    ///
    /// # Errors
    /// As [`GoldenFile::open`], less [`GoldenError::Io`].
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self, GoldenError> {
        // The shard's checks: a readable header whose tensors exactly cover the data
        // (catches truncation).
        let shard = Shard::from_bytes(path, bytes).map_err(|e| match e {
            CheckpointError::NotSafetensors { reason, .. } => GoldenError::Format { path: path.into(), reason },
            other => GoldenError::Format { path: path.into(), reason: other.to_string() },
        })?;
        let by_name = shard.tensors().iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        let file = Self { path: path.into(), shard, by_name };
        for (key, what, ours) in [
            ("golden_format", "golden format", FORMAT_VERSION),
            ("blockscale_version", "blockscale", BLOCKSCALE_VERSION),
        ] {
            let found = file.meta(key)?;
            if found != ours {
                return Err(GoldenError::Version { path: path.into(), what, found: found.into(), ours: ours.into() });
            }
        }
        Ok(file)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A metadata value.
    ///
    /// # Errors
    /// [`GoldenError::Metadata`] if absent.
    pub fn meta(&self, key: &str) -> Result<&str, GoldenError> {
        self.meta_opt(key).ok_or_else(|| self.bad_meta(key, "missing".into()))
    }

    /// A metadata value if present.
    pub fn meta_opt(&self, key: &str) -> Option<&str> {
        self.shard.metadata().get(key).map(String::as_str)
    }

    /// A metadata value parsed with `FromStr`.
    ///
    /// # Errors
    /// [`GoldenError::Metadata`] if absent or unparsable.
    pub fn parse<T: FromStr>(&self, key: &str) -> Result<T, GoldenError> {
        let v = self.meta(key)?;
        v.parse().map_err(|_| self.bad_meta(key, format!("cannot parse {v:?}")))
    }

    /// An f32 stored in metadata as its bit pattern (`0x3f800000`), so that it survives
    /// exactly.
    ///
    /// # Errors
    /// [`GoldenError::Metadata`] if absent or not hex.
    pub fn f32_bits(&self, key: &str) -> Result<f32, GoldenError> {
        let v = self.meta(key)?;
        u32::from_str_radix(v.trim_start_matches("0x"), 16)
            .map(f32::from_bits)
            .map_err(|_| self.bad_meta(key, format!("not an f32 bit pattern: {v:?}")))
    }

    pub(crate) fn bad_meta(&self, key: &str, problem: String) -> GoldenError {
        GoldenError::Metadata { path: self.path.clone(), key: key.into(), problem }
    }

    /// Whether the file holds tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    fn entry(&self, name: &str) -> Result<&TensorEntry, GoldenError> {
        let i = self
            .by_name
            .get(name)
            .ok_or_else(|| GoldenError::MissingTensor { path: self.path.clone(), tensor: name.into() })?;
        Ok(&self.shard.tensors()[*i])
    }

    /// The raw bytes of tensor `name`, after checking its dtype and shape.
    ///
    /// # Errors
    /// [`GoldenError::MissingTensor`], [`GoldenError::Dtype`], [`GoldenError::Shape`].
    pub fn bytes(&self, name: &str, dtype: Dtype, shape: &[usize]) -> Result<&[u8], GoldenError> {
        let t = self.entry(name)?;
        if t.dtype != dtype {
            return Err(GoldenError::Dtype {
                path: self.path.clone(),
                tensor: name.into(),
                expected: format!("{dtype:?}"),
                actual: format!("{:?}", t.dtype),
            });
        }
        if t.shape != shape {
            return Err(GoldenError::Shape {
                path: self.path.clone(),
                tensor: name.into(),
                expected: shape.to_vec(),
                actual: t.shape.clone(),
            });
        }
        Ok(self.shard.bytes(t))
    }

    /// The dtype and shape of tensor `name`.
    ///
    /// # Errors
    /// [`GoldenError::MissingTensor`].
    pub fn info(&self, name: &str) -> Result<(Dtype, Vec<usize>), GoldenError> {
        let t = self.entry(name)?;
        Ok((t.dtype, t.shape.clone()))
    }

    /// A [`Writer`] holding every tensor and metadata entry of this file (to derive a
    /// modified file, e.g. in tests of the error paths).
    pub fn to_writer(&self) -> Writer {
        let mut w = Writer::new();
        for (k, v) in self.shard.metadata() {
            w.meta(k, v.clone());
        }
        for t in self.shard.tensors() {
            w.tensor(&t.name, t.dtype, &t.shape, self.shard.bytes(t).to_vec());
        }
        w
    }

    /// An f32 tensor.
    ///
    /// # Errors
    /// As [`Self::bytes`].
    pub fn f32s(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, GoldenError> {
        Ok(self
            .bytes(name, Dtype::F32, shape)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// An f16 tensor.
    ///
    /// # Errors
    /// As [`Self::bytes`].
    pub fn f16s(&self, name: &str, shape: &[usize]) -> Result<Vec<f16>, GoldenError> {
        Ok(self.bytes(name, Dtype::F16, shape)?.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect())
    }

    /// A bf16 tensor.
    ///
    /// # Errors
    /// As [`Self::bytes`].
    pub fn bf16s(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>, GoldenError> {
        Ok(self.bytes(name, Dtype::BF16, shape)?.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect())
    }
}

/// Collects tensors and metadata and writes a golden file atomically (a temporary file
/// renamed into place), with the version keys set.
#[derive(Debug, Default)]
pub struct Writer {
    tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
    meta: HashMap<String, String>,
}

impl Writer {
    /// An empty file with the version keys.
    pub fn new() -> Self {
        let mut w = Self::default();
        w.meta("golden_format", FORMAT_VERSION).meta("blockscale_version", BLOCKSCALE_VERSION);
        w
    }

    /// Sets a metadata entry.
    pub fn meta(&mut self, key: &str, value: impl Into<String>) -> &mut Self {
        self.meta.insert(key.into(), value.into());
        self
    }

    /// Sets an f32 metadata entry as its bit pattern.
    pub fn meta_f32(&mut self, key: &str, value: f32) -> &mut Self {
        self.meta(key, format!("0x{:08x}", value.to_bits()))
    }

    /// Adds a tensor of raw little-endian bytes (replacing one of the same name).
    pub fn tensor(&mut self, name: &str, dtype: Dtype, shape: &[usize], bytes: Vec<u8>) -> &mut Self {
        self.tensors.retain(|t| t.0 != name);
        self.tensors.push((name.into(), dtype, shape.to_vec(), bytes));
        self
    }

    /// Removes a tensor.
    pub fn remove(&mut self, name: &str) -> &mut Self {
        self.tensors.retain(|t| t.0 != name);
        self
    }

    /// Adds an f32 tensor.
    pub fn f32s(&mut self, name: &str, shape: &[usize], v: &[f32]) -> &mut Self {
        self.tensor(name, Dtype::F32, shape, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    /// Writes the file: the safetensors layout (8-byte header length, JSON header,
    /// tensor data), with the header's keys sorted so that the same case always gives
    /// the same bytes, into a temporary file renamed into place.
    ///
    /// # Errors
    /// [`GoldenError::Io`]; [`GoldenError::Format`] if a tensor's bytes do not match its
    /// dtype and shape (checked by reading the result back).
    pub fn write(&self, path: &Path) -> Result<(), GoldenError> {
        fn json(s: &str) -> String {
            let mut out = String::from('"');
            for ch in s.chars() {
                match ch {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        let mut order: Vec<usize> = (0..self.tensors.len()).collect();
        order.sort_by(|&x, &y| self.tensors[x].0.cmp(&self.tensors[y].0));
        let mut meta: Vec<(&String, &String)> = self.meta.iter().collect();
        meta.sort();
        let mut header = String::from("{\"__metadata__\":{");
        header.push_str(&meta.iter().map(|(k, v)| format!("{}:{}", json(k), json(v))).collect::<Vec<_>>().join(","));
        header.push('}');
        let mut data = Vec::new();
        for &i in &order {
            let (name, dtype, shape, bytes) = &self.tensors[i];
            let start = data.len();
            data.extend_from_slice(bytes);
            let dims = shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
            header.push_str(&format!(
                ",{}:{{\"dtype\":\"{dtype}\",\"shape\":[{dims}],\"data_offsets\":[{start},{}]}}",
                json(name),
                data.len()
            ));
        }
        header.push('}');
        // Pad the header with spaces to a multiple of 8, as safetensors does.
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(&data);
        SafeTensors::deserialize(&file)
            .map_err(|e| GoldenError::Format { path: path.into(), reason: format!("{e:?}") })?;
        let tmp = path.with_extension("safetensors.tmp");
        let io = |source| GoldenError::Io { path: path.into(), source };
        std::fs::write(&tmp, file).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

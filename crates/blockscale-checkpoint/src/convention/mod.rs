//! The on-disk conventions for quantized weights. Each is one file filling in a
//! [`Convention`] (its name, what it reads, how its weights are recognised and, where
//! blockscale writes it, [`Writes`]: how a quantized weight is stored and which configs
//! declare it), listed once in [`CONVENTIONS`]. Adding a convention is one new file and
//! one line there.
//!
//! | convention | reads | writes |
//! |---|---|---|
//! | `native` | blockscale's own `{name}.codes` / `.scales` with metadata | every scheme, either scale layout |
//! | `modelopt` | NVIDIA ModelOpt NVFP4 and FP8 (per tensor or channel) | NVFP4; FP8 per tensor ([`modelopt::fp8_per_tensor`]) |
//! | `compressed-tensors` | `nvfp4-pack-quantized`, `mxfp4-pack-quantized`, `pack-quantized` INT4, `float-quantized` FP8 | NVFP4, MXFP4, INT4-G32/G128, FP8 128x128 |
//! | `gpt-oss` | OpenAI gpt-oss MXFP4 (`*_blocks`, `*_scales`) | - |
//! | `deepseek` | DeepSeek-V3 FP8 (`weight_scale_inv` per 128x128) | FP8 128x128 |

pub mod compressed_tensors;
mod coverage;
pub mod deepseek;
pub mod gpt_oss;
pub mod modelopt;
pub mod native;
mod shared;

use std::collections::HashSet;

use blockscale_formats::{GlobalScale, QuantShape, QuantizedMatrix, ScaleData, ScaleLayout, Scheme};
use safetensors::Dtype;

use crate::dtypes::scale_bytes;
use crate::{Catalog, CheckpointError, Configs, Declared, Found, PlannedTensor, TensorEntry};

pub use compressed_tensors::CtConfig;
pub use coverage::check_coverage;

/// Every convention, in the order detection asks them about a tensor (the first that
/// claims it decides). Their tensor names are disjoint but for `.weight`, where the
/// side tensors tell them apart.
pub static CONVENTIONS: &[&Convention] = &[
    &native::NATIVE,
    &modelopt::MODELOPT,
    &compressed_tensors::COMPRESSED_TENSORS,
    &gpt_oss::GPT_OSS,
    &deepseek::DEEPSEEK,
];

/// The convention named `name` (`"modelopt"`, `"compressed-tensors"`, ...).
pub fn by_name(name: &str) -> Option<&'static Convention> {
    CONVENTIONS.iter().copied().find(|c| c.name() == name)
}

/// The conventions blockscale writes, with their names.
pub fn writers() -> impl Iterator<Item = (&'static str, &'static dyn Writes)> {
    CONVENTIONS.iter().filter_map(|c| Some((c.name(), c.writes()?)))
}

/// What every convention reads, for messages (`"native (blockscale), ModelOpt ..."`).
pub fn supported() -> String {
    CONVENTIONS.iter().map(|c| c.reads()).collect::<Vec<_>>().join(", ")
}

/// How a convention recognises its weights ([`Convention::detect`]).
pub type Detector = fn(&Detect<'_>, &TensorEntry) -> Result<Option<Found>, CheckpointError>;

/// How a convention checks what its config declares ([`Convention::check_declared`]).
pub type DeclaredCheck = fn(&Detect<'_>, &[Found]) -> Result<(), CheckpointError>;

/// One way of storing quantized weights in safetensors files: its name, what it reads,
/// how it recognises its weights and, where blockscale writes it, how. Each
/// convention's file fills one in ([`Convention::new`]).
pub struct Convention {
    name: &'static str,
    reads: &'static str,
    detect: Detector,
    check_declared: Option<DeclaredCheck>,
    writes: Option<&'static dyn Writes>,
}

impl Convention {
    /// The convention `name` (as reports and `--convention` spell it), reading `reads`
    /// (a few words, for messages), whose weights `detect` recognises; blockscale
    /// writes none and no declaration is checked until [`Convention::writing`] and
    /// [`Convention::checking`] say otherwise.
    pub const fn new(name: &'static str, reads: &'static str, detect: Detector) -> Self {
        Self { name, reads, detect, check_declared: None, writes: None }
    }

    /// The convention, written by `writes`.
    pub const fn writing(self, writes: &'static dyn Writes) -> Self {
        Self { writes: Some(writes), ..self }
    }

    /// The convention, checking what its config declares with `check`.
    pub const fn checking(self, check: DeclaredCheck) -> Self {
        Self { check_declared: Some(check), ..self }
    }

    /// Its stable name, as reports and `--convention` spell it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What it reads, in a few words, for messages.
    pub fn reads(&self) -> &'static str {
        self.reads
    }

    /// If `t` is the main (element-data) tensor of a weight of this convention, the
    /// weight: its parts and how it decodes; `None` if `t` is not one of its tensors.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] naming a companion with the wrong dtype or shape;
    /// [`CheckpointError::Unsupported`] for a variant of the convention that is not read.
    pub fn detect(&self, cx: &Detect<'_>, t: &TensorEntry) -> Result<Option<Found>, CheckpointError> {
        (self.detect)(cx, t)
    }

    /// Checks what the checkpoint's config declares against the weights found (run
    /// once after detection).
    ///
    /// # Errors
    /// [`CheckpointError::Unsupported`] or [`CheckpointError::Tensor`], as the
    /// convention decides.
    pub fn check_declared(&self, cx: &Detect<'_>, found: &[Found]) -> Result<(), CheckpointError> {
        self.check_declared.map_or(Ok(()), |check| check(cx, found))
    }

    /// How blockscale writes it, if it does.
    pub fn writes(&self) -> Option<&'static dyn Writes> {
        self.writes
    }
}

/// Planned output tensors and the metadata entries that go with them.
pub type Plan = (Vec<PlannedTensor>, Vec<(String, String)>);

/// Writing a convention: the tensors of a quantized weight (known from its shape alone,
/// before any data is computed, so that a file's header can be written first), their
/// bytes and the configs declaring them. A convention describes each tensor of a weight
/// once ([`Writes::parts`]: name, dtype, shape and what it holds); the planned header
/// ([`Writes::plan`]) and the bytes after the codes and scales ([`Writes::encode_rest`])
/// both follow from that description.
pub trait Writes: Sync {
    /// The tensors of weight `w`, the codes first and the block scales second, each with
    /// what it holds; `None` for a scheme the convention cannot store.
    fn parts(&self, w: &ToStore<'_>) -> Option<Vec<Part>>;

    /// What it stores, for the refusal of another scheme (`"the deepseek convention
    /// stores fp8-block (...) only"`).
    fn stores(&self) -> &'static str;

    /// The metadata entries the file carries for weight `w` (none but the native
    /// convention's).
    fn metadata(&self, w: &ToStore<'_>) -> Vec<(String, String)> {
        let _ = w;
        Vec::new()
    }

    /// The output tensors of weight `name` (`rows x k`), the weight's codes first and
    /// its block scales second, and the metadata entries the file carries for it.
    /// `shape`: `(rows, k)`.
    /// `input_scale`: whether calibration gives the layer an activation scale.
    ///
    /// # Errors
    /// [`CheckpointError::Invalid`] for a shape the scheme cannot hold,
    /// [`CheckpointError::Unsupported`] for a scheme the convention cannot store.
    fn plan(
        &self,
        scheme: Scheme,
        layout: ScaleLayout,
        name: &str,
        (rows, k): (usize, usize),
        input_scale: bool,
    ) -> Result<Plan, CheckpointError> {
        let (w, parts) = parts_of(self, scheme, layout, name, (rows, k), input_scale)?;
        Ok((parts.into_iter().map(|p| p.tensor).collect(), self.metadata(&w)))
    }

    /// The tensors after a weight's codes and scales (every convention stores those
    /// exactly as a [`QuantizedMatrix`] holds them), from its shape, its per-tensor
    /// scale and a calibrated layer's activation scale: those [`Writes::plan`] plans
    /// (none for a shape or scheme it refuses).
    fn encode_rest(
        &self,
        scheme: Scheme,
        name: &str,
        (rows, k): (usize, usize),
        global: Option<GlobalScale>,
        input: Option<GlobalScale>,
    ) -> Vec<(String, Vec<u8>)> {
        let Ok(shape) = scheme.shape(rows, k) else { return Vec::new() };
        // The layout changes the scales' shape only, which is not among these tensors.
        let w = ToStore { name, shape, layout: ScaleLayout::Linear, input_scale: input.is_some() };
        let parts = self.parts(&w).unwrap_or_default();
        parts.into_iter().filter_map(|p| Some((p.tensor.name, p.holds.bytes((rows, k), global, input)?))).collect()
    }

    /// The configs declaring `scheme` (`calibrated`: the layers carry activation
    /// scales; `ignore`: the layers left unquantized).
    fn configs(&self, scheme: Scheme, calibrated: bool, ignore: &[String]) -> Configs;

    /// The scale layouts it stores (linear only, but for the native convention).
    fn scale_layouts(&self) -> &'static [ScaleLayout] {
        &[ScaleLayout::Linear]
    }

    /// Whether it stores an activation scale from calibration for `scheme`.
    fn stores_input_scale(&self, scheme: Scheme) -> bool {
        let _ = scheme;
        false
    }

    /// Why a K the quantizer refuses would still fit the convention, for the shape
    /// error (DeepSeek's layout allows any K).
    fn k_note(&self) -> Option<&'static str> {
        None
    }
}

/// A weight to store, as far as its tensors' names, dtypes and shapes go.
#[derive(Clone, Copy, Debug)]
pub struct ToStore<'a> {
    /// Its name (`a.b.weight`).
    pub name: &'a str,
    /// Its scheme, logical shape and scale matrix (checked).
    pub shape: QuantShape,
    /// The layout of its scales.
    pub layout: ScaleLayout,
    /// Whether calibration gives the layer an activation scale.
    pub input_scale: bool,
}

/// One tensor of a stored weight: as the header plans it, and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its name, dtype and shape.
    pub tensor: PlannedTensor,
    /// What it holds.
    pub holds: Holds,
}

impl Part {
    /// Tensor `name` (`dtype`, `shape`) holding `holds`.
    pub fn new(name: String, dtype: Dtype, shape: Vec<usize>, holds: Holds) -> Self {
        Self { tensor: PlannedTensor::new(name, dtype, shape), holds }
    }
}

/// What a tensor of a stored weight holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// The codes, as the [`QuantizedMatrix`] holds them.
    Codes,
    /// The block scales, as the [`QuantizedMatrix`] holds them.
    Scales,
    /// The per-tensor encode scale, one f32 (1 without one; compressed-tensors'
    /// "divisor" semantics, the native `global_encode`).
    GlobalEncode,
    /// The per-tensor decode scale, one f32: the encode scale's reciprocal (1 without one).
    GlobalDecode,
    /// The activation scale calibration gives the layer, as an encode scale.
    InputEncode,
    /// The activation scale calibration gives the layer, as a decode scale.
    InputDecode,
    /// The logical `[rows, k]`, as two i64.
    Dims,
}

impl Holds {
    /// The bytes of a tensor after the codes and scales (`None` for those two, and for
    /// an activation scale the layer lacks).
    fn bytes(
        self,
        (rows, k): (usize, usize),
        global: Option<GlobalScale>,
        input: Option<GlobalScale>,
    ) -> Option<Vec<u8>> {
        let f32_bytes = |x: f32| Some(x.to_le_bytes().to_vec());
        match self {
            Self::Codes | Self::Scales => None,
            Self::GlobalEncode => f32_bytes(global.map_or(1.0, |g| g.encode())),
            Self::GlobalDecode => f32_bytes(global.map_or(1.0, |g| g.decode())),
            Self::InputEncode => f32_bytes(input?.encode()),
            Self::InputDecode => f32_bytes(input?.decode()),
            Self::Dims => Some([rows as i64, k as i64].iter().flat_map(|d| d.to_le_bytes()).collect()),
        }
    }
}

/// The parts `w` stores weight `name` (`rows x k` of `scheme`, scales in `layout`) in,
/// with the weight they describe: what [`Writes::plan`] and [`encode`] start from.
///
/// # Errors
/// As [`Writes::plan`].
fn parts_of<'n, W: Writes + ?Sized>(
    w: &W,
    scheme: Scheme,
    layout: ScaleLayout,
    name: &'n str,
    (rows, k): (usize, usize),
    input_scale: bool,
) -> Result<(ToStore<'n>, Vec<Part>), CheckpointError> {
    let shape = scheme.shape(rows, k).map_err(|e| CheckpointError::Invalid(format!("{name}: {e}")))?;
    let to_store = ToStore { name, shape, layout, input_scale };
    match w.parts(&to_store) {
        Some(parts) => Ok((to_store, parts)),
        None => Err(CheckpointError::Unsupported(format!(
            "{}, not {scheme}; use --convention native for other schemes",
            w.stores()
        ))),
    }
}

/// The bytes of the tensors `w.plan` plans for the quantized weight `q` stored as
/// `name`, in plan order, with a calibrated layer's activation scale `input`. The codes
/// and byte scales are moved, not copied.
///
/// # Errors
/// As [`Writes::plan`].
pub fn encode(
    w: &dyn Writes,
    name: &str,
    q: QuantizedMatrix,
    input: Option<GlobalScale>,
) -> Result<Vec<(String, Vec<u8>)>, CheckpointError> {
    let (_, stored) = parts_of(w, q.scheme(), q.scale_layout(), name, (q.rows(), q.k()), input.is_some())?;
    let q = q.into_parts();
    let (shape, global) = ((q.rows, q.k), q.global_scale);
    let mut data = Some(q.data);
    let mut scales = Some(match q.scales {
        ScaleData::Bytes(b) => b,
        other => scale_bytes(&other),
    });
    Ok(stored
        .into_iter()
        .filter_map(|p| {
            let bytes = match p.holds {
                Holds::Codes => data.take(),
                Holds::Scales => scales.take(),
                other => other.bytes(shape, global, input),
            };
            Some((p.tensor.name, bytes?))
        })
        .collect())
}

/// The layer prefix of a weight name (`a.b.weight` -> `a.b`).
pub fn layer_prefix(name: &str) -> &str {
    name.strip_suffix(".weight").unwrap_or(name)
}

/// What detection sees: every tensor of the checkpoint and what its configs declare.
pub struct Detect<'c> {
    /// Every tensor by name.
    pub catalog: &'c Catalog<'c>,
    /// The checkpoint's compressed-tensors config, checked, if it declares one.
    pub ct: Option<CtConfig>,
    /// What the checkpoint's configs declare.
    pub declared: &'c Declared,
}

/// Finds every quantized weight of `catalog`, asking [`CONVENTIONS`] about each tensor
/// in file order; every tensor no weight consumes is plain. Returns the weights and the
/// names of every tensor they consume.
///
/// # Errors
/// [`CheckpointError::Unsupported`] for a compressed-tensors config blockscale does not
/// read; the conventions' errors ([`Convention::detect`]).
pub fn detect(catalog: &Catalog<'_>, declared: &Declared) -> Result<(Vec<Found>, HashSet<String>), CheckpointError> {
    let cx = Detect { catalog, ct: CtConfig::declared(declared)?, declared };
    let mut found = Vec::new();
    for shard in catalog.shards() {
        for t in shard.tensors() {
            for c in CONVENTIONS {
                if let Some(f) = c.detect(&cx, t)? {
                    found.push(f);
                    break;
                }
            }
        }
    }
    let consumed = found.iter().flat_map(|f| f.parts.iter().cloned()).collect();
    Ok((found, consumed))
}

/// What a reader does first: reads what the configs declare (`side_files`: a folder's
/// config.json and hf_quant_config.json), finds every quantized weight ([`detect`]) and
/// refuses what it could not hand back as asked ([`check_coverage`], [`check_declared`]).
/// Returns the weights and the names of every tensor they consume.
///
/// # Errors
/// The first of those steps' errors.
pub fn recognise(
    catalog: &Catalog<'_>,
    side_files: &[std::path::PathBuf],
) -> Result<(Vec<Found>, HashSet<String>), CheckpointError> {
    let declared = Declared::read(catalog, side_files);
    let (found, consumed) = detect(catalog, &declared)?;
    check_coverage(catalog, &found, &consumed, &declared)?;
    check_declared(catalog, &declared, &found)?;
    Ok((found, consumed))
}

/// Each convention's check of what the configs declare against the weights `found`
/// ([`Convention::check_declared`]): what a reader runs before decoding.
///
/// # Errors
/// The first convention's error.
pub fn check_declared(catalog: &Catalog<'_>, declared: &Declared, found: &[Found]) -> Result<(), CheckpointError> {
    let cx = Detect { catalog, ct: CtConfig::declared(declared)?, declared };
    CONVENTIONS.iter().try_for_each(|c| c.check_declared(&cx, found))
}

impl Detect<'_> {
    /// A [`CheckpointError::Tensor`] about tensor `name`, in the file that holds it.
    pub fn err(&self, name: &str, reason: impl Into<String>) -> CheckpointError {
        CheckpointError::tensor(self.catalog.path_of(name), name, reason)
    }

    /// Whether the checkpoint holds tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.catalog.get(name).is_some()
    }

    /// Tensor `name`, which a weight needs.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] if it is missing.
    pub fn tensor(&self, name: &str) -> Result<&TensorEntry, CheckpointError> {
        self.catalog.get(name).map(|(_, t)| t).ok_or_else(|| self.err(name, "missing"))
    }

    /// Checks that tensor `name` exists with `dtype` and, if given, `shape`.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] naming what differs.
    pub fn expect(&self, name: &str, dtype: Dtype, shape: Option<&[usize]>) -> Result<(), CheckpointError> {
        let t = self.tensor(name)?;
        if t.dtype != dtype {
            return Err(self.err(name, format!("is {:?}, expected {dtype:?}", t.dtype)));
        }
        if let Some(s) = shape
            && t.shape != s
        {
            return Err(self.err(name, format!("has shape {:?}, expected {s:?} to match its weight", t.shape)));
        }
        Ok(())
    }

    /// If `t` is named `{p}{suffix}` and the checkpoint holds `{p}{companion}` (a main
    /// tensor and the companion that tells its convention): `p` and the companion's name.
    pub fn with_companion<'t>(&self, t: &'t TensorEntry, suffix: &str, companion: &str) -> Option<(&'t str, String)> {
        let p = t.name.strip_suffix(suffix)?;
        Some((p, self.optional(format!("{p}{companion}"))?))
    }

    /// `name` when the checkpoint holds it: an optional companion (an activation scale).
    pub fn optional(&self, name: String) -> Option<String> {
        self.has(&name).then_some(name)
    }

    /// Checks that `name` is one F32 value.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`].
    pub fn scalar_f32(&self, name: &str) -> Result<(), CheckpointError> {
        self.expect(name, Dtype::F32, None)?;
        let t = self.tensor(name)?;
        if t.numel() != 1 {
            return Err(self.err(name, format!("has shape {:?}, expected one value", t.shape)));
        }
        Ok(())
    }

    /// The float scale tensor `name`: F32, BF16 or F16.
    ///
    /// # Errors
    /// [`CheckpointError::Tensor`] if it is missing or of another dtype.
    pub fn float_scale(&self, name: &str) -> Result<&TensorEntry, CheckpointError> {
        let s = self.tensor(name)?;
        if !matches!(s.dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            return Err(self.err(name, format!("is {:?}, expected F32, BF16 or F16", s.dtype)));
        }
        Ok(s)
    }
}

/// The `producer` entry of the configs blockscale writes.
fn producer() -> serde_json::Value {
    serde_json::json!({ "name": "blockscale", "version": env!("CARGO_PKG_VERSION") })
}

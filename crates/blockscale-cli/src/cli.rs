//! The command line: every subcommand and option (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::error::CliError;

/// Block-scaled low-precision numerics: quantize safetensors checkpoints to NVFP4, MX,
/// FP8 block or INT4, read the formats in the wild, and measure accuracy and speed.
#[derive(Debug, Parser)]
#[command(name = "blockscale", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Quantize the 2-D linear weights of a safetensors file or sharded checkpoint.
    Quantize(QuantizeArgs),
    /// Dequantize a quantized checkpoint (ModelOpt, compressed-tensors, gpt-oss MXFP4,
    /// DeepSeek FP8, native) back to bf16, f16 or f32.
    Dequantize(DequantizeArgs),
    /// List every tensor: name, dtype, shape, detected convention, bits per weight, size.
    Inspect(InspectArgs),
    /// Accuracy of every scheme on a checkpoint's weights, or on built-in demo weights.
    Eval(EvalArgs),
    /// Quantize and GEMM/GEMV throughput on a standard shape set, with anchors.
    Bench(BenchArgs),
}

/// Output conventions of `quantize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConventionArg {
    /// NVIDIA ModelOpt: NVFP4 (`weight`, `weight_scale`, `weight_scale_2`) or FP8 per
    /// tensor (`weight`, `weight_scale`), with hf_quant_config.json.
    Modelopt,
    /// compressed-tensors `nvfp4-pack-quantized` (`weight_packed`, `weight_scale`, `weight_global_scale`).
    CompressedTensors,
    /// blockscale's own tensors and metadata: any scheme, either scale layout.
    Native,
    /// DeepSeek-V3 FP8 (`weight` E4M3, `weight_scale_inv` f32 per 128x128 tile): fp8-block only.
    Deepseek,
}

/// Scale layouts for the native convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// Row-major `[rows, K/block]`.
    Linear,
    /// The tensor-core 128x4 layout (NVFP4 and MX only).
    Swizzled,
}

/// Compute backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// The CPU (always available).
    Cpu,
    /// An NVIDIA GPU (needs a build with `--features cuda`).
    Cuda,
}

impl BackendArg {
    /// Opens the backend this names (the first GPU for `cuda`).
    ///
    /// # Errors
    /// [`CliError::Unsupported`] for CUDA in a build without it, [`CliError::Cuda`] if
    /// no usable GPU is found.
    pub fn open(self) -> Result<blockscale::Backend, CliError> {
        match self {
            Self::Cpu => Ok(blockscale::Backend::Cpu),
            Self::Cuda => blockscale::Backend::cuda(0).map_err(|e| match e {
                blockscale::Error::CudaNotBuilt => Self::not_built(),
                other => CliError::Cuda(other.to_string()),
            }),
        }
    }

    fn not_built() -> CliError {
        CliError::Unsupported(
            "this blockscale was built without CUDA: rebuild with \
             `cargo build --release -p blockscale-cli --features cuda` (needs nvcc, see the README)"
                .into(),
        )
    }

    /// [`BackendArg::open`] on another thread, with the GPU's pinned staging made there
    /// too, so that opening a GPU (driver and context: a few hundred ms) overlaps mapping
    /// and planning the checkpoint; a build without the backend is refused at once.
    ///
    /// # Errors
    /// [`CliError::Unsupported`] for CUDA in a build without it.
    pub fn open_in_background(self) -> Result<Opening, CliError> {
        if self == Self::Cuda && !cfg!(feature = "cuda") {
            return Err(Self::not_built());
        }
        Ok(Opening(std::thread::spawn(move || {
            let backend = self.open()?;
            // The GPU's pinned staging too (about 50 ms), off the first weight's path.
            backend.reserve_host_staging().map_err(|e| CliError::Cuda(e.to_string()))?;
            Ok(backend)
        })))
    }
}

/// A backend being opened ([`BackendArg::open_in_background`]).
pub struct Opening(std::thread::JoinHandle<Result<blockscale::Backend, CliError>>);

impl Opening {
    /// Waits for the backend.
    ///
    /// # Errors
    /// As [`BackendArg::open`].
    pub fn join(self) -> Result<blockscale::Backend, CliError> {
        self.0.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// Output dtypes of `dequantize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
}

/// Whose scale choices NVFP4 quantization follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RecipeArg {
    /// blockscale's: the encode scale `2688 / amax`, zero blocks stored with scale 0
    /// (docs/NUMERICS.md).
    Blockscale,
    /// NVIDIA ModelOpt's, byte for byte: `amax / 2688` decode scale, zero blocks with
    /// scale 1.0, block scales floored at 2^-9 (CPU only; `cargo xtask peers` checks it).
    Modelopt,
}

/// What NaN and Inf in a weight do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NonFiniteArg {
    /// Stop with an error naming the file, tensor, row and column (the default).
    Error,
    /// Quantize the blocks holding them as NaN blocks and report them as warnings.
    Poison,
}

/// The flags of the commands that write a checkpoint.
#[derive(Debug, Args)]
pub struct WriteFlags {
    /// Replace an existing output.
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `blockscale quantize`.
#[derive(Debug, Args)]
pub struct QuantizeArgs {
    /// A `.safetensors` file, or a folder holding one or a sharded checkpoint
    /// (`model.safetensors.index.json`).
    pub input: PathBuf,
    /// Output file (for a file input) or folder (for a folder input).
    #[arg(short, long)]
    pub output: PathBuf,
    /// The scheme (`--help` lists them).
    #[arg(long, long_help = crate::scheme_arg::quantize_help())]
    pub scheme: String,
    /// How the quantized tensors are named and scaled on disk.
    #[arg(long, value_enum, default_value_t = ConventionArg::Native)]
    pub convention: ConventionArg,
    /// Scale layout (native convention only; the others are linear by definition).
    #[arg(long, value_enum, default_value_t = LayoutArg::Linear)]
    pub scale_layout: LayoutArg,
    /// Quantize only tensors whose name matches one of these globs (default: every
    /// 2-D `*.weight`).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Never quantize tensors whose name matches one of these globs (added to the
    /// defaults `*embed*` and `*lm_head*`, which `--no-default-excludes` drops).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Quantize embeddings and the LM head too when they match.
    #[arg(long)]
    pub no_default_excludes: bool,
    /// Activations recorded for calibration: a safetensors file with one tensor per
    /// layer, named as the layer (the weight's name without `.weight`), any float
    /// dtype and shape; its amax gives `input_scale` / `input_global_scale` (NVFP4),
    /// or `input_scale` = amax / 448 (fp8-per-tensor).
    #[arg(long, value_name = "ACTS")]
    pub calibration: Option<PathBuf>,
    /// Whose NVFP4 scale choices to follow (NVFP4 only).
    #[arg(long, value_enum, default_value_t = RecipeArg::Blockscale)]
    pub recipe: RecipeArg,
    /// Where to compute.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// What NaN/Inf in a weight does.
    #[arg(long, value_enum, default_value_t = NonFiniteArg::Error)]
    pub non_finite: NonFiniteArg,
    /// Where the report and progress go, and whether to replace the output.
    #[command(flatten)]
    pub out: WriteFlags,
}

/// `blockscale dequantize`.
#[derive(Debug, Args)]
pub struct DequantizeArgs {
    /// A quantized `.safetensors` file or checkpoint folder.
    pub input: PathBuf,
    /// Output file (for a file input) or folder (for a folder input).
    #[arg(short, long)]
    pub output: PathBuf,
    /// The dtype of the dequantized weights.
    #[arg(long, value_enum, default_value_t = DtypeArg::Bf16)]
    pub dtype: DtypeArg,
    /// Where to dequantize the library's schemes (the other formats decode on the CPU);
    /// the values are the same on either.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// Where the report and progress go, and whether to replace the output.
    #[command(flatten)]
    pub out: WriteFlags,
}

/// `blockscale inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A `.safetensors` file or checkpoint folder.
    pub input: PathBuf,
    /// Print JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `blockscale eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A `.safetensors` file or checkpoint folder (omit with `--demo`).
    #[arg(required_unless_present = "demo")]
    pub input: Option<PathBuf>,
    /// Built-in deterministic transformer-like weights (heavy tails, outlier channels).
    #[arg(long, conflicts_with = "input")]
    pub demo: bool,
    /// `all` or a comma-separated list of schemes.
    #[arg(long, default_value = "all")]
    pub schemes: String,
    /// Only tensors matching one of these globs (checkpoint input).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// At most this many tensors (checkpoint input; the largest weights are not favoured:
    /// file order).
    #[arg(long)]
    pub max_tensors: Option<usize>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG plot of the error per scheme and tensor.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Replace an existing plot file.
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// `blockscale bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Where to run.
    #[arg(long, value_enum, default_value_t = BackendArg::Cpu)]
    pub backend: BackendArg,
    /// A smaller shape set that finishes in seconds (for tests and smoke runs).
    #[arg(long)]
    pub quick: bool,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

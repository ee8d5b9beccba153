//! One API over both backends: [`Backend`] runs quantize, dequantize, the block-scaled
//! GEMMs and the GEMV on the CPU or on a CUDA GPU, taking and returning host arrays.
//!
//! Each call on [`Backend::Cuda`] copies its inputs to the device, runs the kernels and
//! copies the result back: the convenient form for tools and tests. Engines that keep
//! weights and activations on the GPU call `blockscale::cuda` on device buffers instead.

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};

use crate::{Element, Epilogue, Error, QuantizeOptions, QuantizedMatrix, Scheme};

/// Runs `$call` on the activations `$x` (element type `$I`) as the CUDA kernels' bf16 or
/// f16 input, or refuses f32 ones with [`Error::Unsupported`] saying `$f32`.
#[cfg(feature = "cuda")]
macro_rules! on_half {
    ($I:ty, $x:expr, $f32:expr, |$h:ident| $call:expr) => {
        match <$I as Element>::half_view($x) {
            Some(crate::element::HalfView::F16($h)) => Ok($call?),
            Some(crate::element::HalfView::Bf16($h)) => Ok($call?),
            None => Err(Error::Unsupported { backend: "cuda", what: $f32 }),
        }
    };
}

/// The CUDA GEMV's refusal of f32 activations.
#[cfg(feature = "cuda")]
const F32_GEMV: &str = "a GEMV with f32 activations (the CUDA GEMV reads bf16 or f16; convert them, or use \
                        gemm_weight_only, which takes f32)";
/// The prepared kernels' refusal of f32 activations.
#[cfg(feature = "cuda")]
const F32_PREPARED: &str = "f32 activations on prepared weights (the prepared kernels read bf16 or f16; convert \
                            them, or use gemm_weight_only on the QuantizedMatrix, which takes f32)";

/// Where an operation runs: the CPU, or (feature `cuda`) one CUDA device.
///
/// The CPU and the GPU write the same quantized bytes; the products agree within the
/// documented bounds (docs/NUMERICS.md), exactly on data whose products are exact.
///
/// ```
/// use blockscale::ndarray::Array2;
/// use blockscale::{Backend, Epilogue, QuantizeOptions, Scheme};
///
/// // The first GPU in a build with the `cuda` feature and a GPU, else the CPU.
/// let backend = Backend::cuda_if_available(0)?;
/// let w = Array2::from_shape_fn((256, 512), |(r, c)| ((r * 7 + c) % 13) as f32 - 6.0);
/// let x = Array2::from_shape_fn((4, 512), |(r, c)| ((r + c) % 5) as f32 * 0.25);
/// let q = backend.quantize(w.view(), Scheme::NvFp4, &QuantizeOptions::default())?;
/// let y = backend.gemm_weight_only::<f32, f32>(x.view(), &q, &Epilogue::default())?;
/// assert_eq!(y.dim(), (4, 256));
/// # Ok::<(), blockscale::Error>(())
/// ```
#[derive(Debug)]
pub enum Backend {
    /// The CPU: bit-exact quantize and dequantize, SIMD products on all cores.
    Cpu,
    /// A CUDA device (Hopper SM90 or Blackwell GeForce SM120).
    #[cfg(feature = "cuda")]
    Cuda(blockscale_cuda::Device),
}

impl Backend {
    /// Opens CUDA device `ordinal`.
    ///
    /// # Errors
    /// [`Error::CudaNotBuilt`] in a build without the `cuda` feature; with it, the
    /// device's error (`Error::Cuda`): no driver, no such device, an unsupported GPU.
    pub fn cuda(ordinal: usize) -> Result<Self, Error> {
        #[cfg(feature = "cuda")]
        {
            Ok(Self::Cuda(blockscale_cuda::Device::new(ordinal)?))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Err(Error::CudaNotBuilt)
        }
    }

    /// CUDA device `ordinal` when this build has the CUDA backend and the machine has a
    /// driver and that device, of an architecture blockscale has kernels for (Hopper
    /// SM90, Blackwell GeForce SM120); the CPU otherwise.
    ///
    /// # Errors
    /// Only a supported GPU that fails while being opened (a driver error,
    /// `Error::Cuda`): that is a fault to report, not a reason to run elsewhere.
    pub fn cuda_if_available(ordinal: usize) -> Result<Self, Error> {
        #[cfg(feature = "cuda")]
        {
            use blockscale_cuda::CudaError;
            match blockscale_cuda::Device::new(ordinal) {
                Ok(dev) => Ok(Self::Cuda(dev)),
                Err(CudaError::NoDriver | CudaError::NoDevice { .. } | CudaError::Unsupported { .. }) => Ok(Self::Cpu),
                Err(e) => Err(e.into()),
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Ok(Self::Cpu)
        }
    }

    /// The backend's name: `"cpu"` or `"cuda"`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            #[cfg(feature = "cuda")]
            Self::Cuda(_) => "cuda",
        }
    }

    /// Quantizes `input` (`rows x k`, any strides) to `scheme`; the same bytes on every
    /// backend.
    ///
    /// # Errors
    /// A shape the scheme cannot block, an option it does not take, NaN/Inf under
    /// [`NonFinite::Error`](crate::NonFinite::Error) (with its row and column), and on
    /// the GPU a device failure.
    pub fn quantize<T: Element>(
        &self,
        input: ArrayView2<'_, T>,
        scheme: Scheme,
        options: &QuantizeOptions,
    ) -> Result<QuantizedMatrix, Error> {
        match self {
            Self::Cpu => Ok(blockscale_cpu::quantize(input, scheme, options)?),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(blockscale_cuda::quantize_host(dev, input, scheme, options)?),
        }
    }

    /// Dequantizes `q` to a `rows x k` array of `O`; the same values on every backend.
    ///
    /// # Errors
    /// On the CPU none; on the GPU a device failure.
    pub fn dequantize<O: Element>(&self, q: &QuantizedMatrix) -> Result<Array2<O>, Error> {
        match self {
            Self::Cpu => Ok(blockscale_cpu::dequantize(q)),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(blockscale_cuda::dequantize_host(dev, q)?),
        }
    }

    /// Quantizes `input` (`rows x k`, any strides) into caller buffers: `data` of the
    /// scheme's code bytes and `scales` of its scale bytes (the sizes a
    /// [`QuantRequest`](crate::QuantRequest) for it gives); returns the per-tensor scale
    /// the scheme carries. The same bytes on every backend. On a GPU the values go
    /// through the device's pinned staging in chunks, copies overlapping kernels
    /// (`blockscale::cuda::HostPipeline`): what a checkpoint converter wants.
    ///
    /// # Errors
    /// As [`Backend::quantize`], plus buffers of the wrong size.
    pub fn quantize_into<T: Element>(
        &self,
        input: ArrayView2<'_, T>,
        scheme: Scheme,
        options: &QuantizeOptions,
        data: &mut [u8],
        scales: &mut [u8],
    ) -> Result<Option<crate::GlobalScale>, Error> {
        match self {
            Self::Cpu => Ok(blockscale_cpu::quantize_into(input, scheme, options, data, scales)?),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(dev.with_host_pipeline(|pipe| {
                blockscale_cuda::quantize_host_into(dev, pipe, input, scheme, options, data, scales)
            })?),
        }
    }

    /// Makes the pinned staging [`Backend::quantize_into`] and
    /// [`Backend::dequantize_into`] use on a GPU now (about 50 ms for 104 MB on the H100
    /// machine) rather than inside the first call, e.g. on a thread while a converter
    /// plans its work. Nothing on the CPU.
    ///
    /// # Errors
    /// On the GPU: pinned or device memory that cannot be allocated.
    pub fn reserve_host_staging(&self) -> Result<(), Error> {
        match self {
            Self::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(dev.with_host_pipeline(|_| Ok(()))?),
        }
    }

    /// Dequantizes `q` into `out` (`rows x k` values, row-major); the same values on
    /// every backend. On a GPU through the device's pinned staging, as
    /// [`Backend::quantize_into`].
    ///
    /// # Errors
    /// An output of the wrong length; on the GPU a device failure.
    pub fn dequantize_into<O: Element>(&self, q: &QuantizedMatrix, out: &mut [O]) -> Result<(), Error> {
        match self {
            Self::Cpu => Ok(blockscale_cpu::dequantize_slice(q, out, &blockscale_cpu::DequantizeOptions::default())?),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => {
                Ok(dev.with_host_pipeline(|pipe| blockscale_cuda::dequantize_host_into(dev, pipe, q, out))?)
            }
        }
    }

    /// `epilogue(A · Bᵀ)` of two quantized matrices: `a` is `m x k`, `b` is `n x k` (the
    /// weights' row-major layout), the result `m x n`.
    ///
    /// # Errors
    /// Operands whose schemes or K differ, a pair the backend has no kernel for, a bias
    /// of the wrong length, and on the GPU a device failure.
    pub fn gemm<O: Element>(
        &self,
        a: &QuantizedMatrix,
        b: &QuantizedMatrix,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, Error> {
        match self {
            Self::Cpu => Ok(blockscale_cpu::gemm(a, b, epilogue, &blockscale_cpu::GemmOptions::default())?),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(blockscale_cuda::gemm_host(dev, a, b, epilogue)?),
        }
    }

    /// `epilogue(X · Wᵀ)` of high-precision activations `x` (`m x k`) and quantized
    /// weights `w` (`n x k`): the result is `m x n`.
    ///
    /// # Errors
    /// A K that differs from the weights', a bias of the wrong length, and on the GPU a
    /// device failure.
    pub fn gemm_weight_only<I: Element, O: Element>(
        &self,
        x: ArrayView2<'_, I>,
        w: &QuantizedMatrix,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, Error> {
        match self {
            Self::Cpu => Ok(blockscale_cpu::gemm_weight_only(x, w, epilogue, &blockscale_cpu::GemmOptions::default())?),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(blockscale_cuda::gemm_weight_only_host(dev, x, w, epilogue)?),
        }
    }

    /// `epilogue(W · x)`: one activation vector `x` of length `k` times quantized weights
    /// `w` (`n x k`), the decode step of an inference engine; the result has length `n`.
    ///
    /// # Errors
    /// A length that differs from the weights' K, a bias of the wrong length; on the GPU
    /// f32 activations ([`Error::Unsupported`]: its GEMV reads bf16 or f16) and device
    /// failures.
    pub fn gemv<I: Element, O: Element>(
        &self,
        x: ArrayView1<'_, I>,
        w: &QuantizedMatrix,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array1<O>, Error> {
        match self {
            Self::Cpu => {
                let x = x.as_standard_layout();
                let x = x.as_slice().expect("standard layout is contiguous");
                let y = blockscale_cpu::gemv(x, w, epilogue, &blockscale_cpu::GemmOptions::default())?;
                Ok(Array1::from_vec(y))
            }
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => {
                let x = x.insert_axis(ndarray::Axis(0));
                let y = on_half!(I, x, F32_GEMV, |x| blockscale_cuda::gemv_host::<_, O>(dev, x, w, epilogue))?;
                Ok(y.remove_axis(ndarray::Axis(0)))
            }
        }
    }

    /// Prepares weights for [`Backend::gemv_prepared`] and
    /// [`Backend::gemm_weight_only_prepared`], once, when a model loads: on a
    /// GPU the fast GEMV's layout on the device (`blockscale::cuda::PreparedWeights`:
    /// the codes rearranged so each thread's 16-byte loads decode straight into tensor-core
    /// fragments); on the CPU the matrix as it is (its exact GEMV needs no preparation).
    ///
    /// ```
    /// use blockscale::ndarray::{Array1, Array2};
    /// use blockscale::{Backend, Epilogue, QuantizeOptions, Scheme};
    ///
    /// let backend = Backend::cuda_if_available(0)?;
    /// let w = Array2::from_shape_fn((256, 512), |(r, c)| ((r * 7 + c) % 13) as f32 - 6.0);
    /// let q = backend.quantize(w.view(), Scheme::NvFp4, &QuantizeOptions::default())?;
    /// let prepared = backend.prepare(&q)?;
    /// let x = Array1::from_shape_fn(512, |c| half::bf16::from_f32((c % 5) as f32 * 0.25));
    /// let y = backend.gemv_prepared::<half::bf16, f32>(x.view(), &prepared, &Epilogue::default())?;
    /// assert_eq!(y.len(), 256);
    /// # Ok::<(), blockscale::Error>(())
    /// ```
    ///
    /// # Errors
    /// On the GPU: a matrix too large for the kernels, out of memory, device failures.
    pub fn prepare(&self, w: &QuantizedMatrix) -> Result<Prepared, Error> {
        match self {
            Self::Cpu => Ok(Prepared::Cpu(w.clone())),
            #[cfg(feature = "cuda")]
            Self::Cuda(dev) => Ok(Prepared::Cuda(blockscale_cuda::PreparedWeights::from_host(dev, w)?)),
        }
    }

    /// [`Backend::gemv`] on weights [`Backend::prepare`] made (on this backend).
    ///
    /// # Errors
    /// As [`Backend::gemv`]; [`Error::Unsupported`] for weights prepared on the other
    /// backend.
    pub fn gemv_prepared<I: Element, O: Element>(
        &self,
        x: ArrayView1<'_, I>,
        w: &Prepared,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array1<O>, Error> {
        match (self, w) {
            (Self::Cpu, Prepared::Cpu(q)) => self.gemv(x, q, epilogue),
            #[cfg(feature = "cuda")]
            (Self::Cuda(dev), Prepared::Cuda(p)) => {
                let x = x.insert_axis(ndarray::Axis(0));
                let y = on_half!(I, x, F32_GEMV, |x| blockscale_cuda::gemv_prepared_host::<_, O>(dev, x, p, epilogue))?;
                Ok(y.remove_axis(ndarray::Axis(0)))
            }
            #[cfg(feature = "cuda")]
            _ => Err(other_backend(self)),
        }
    }

    /// The gated GEMV of SwiGLU-style MLPs on prepared weights: `act_g(x · Wgᵀ) *
    /// act_u(x · Wuᵀ)`, each side with its own epilogue (SwiGLU: `Activation::Silu` on
    /// the gate, none on up; alpha from each side's NVFP4 per-tensor scale by default),
    /// the product rounded once to `O`. On a GPU one kernel reads both matrices in one
    /// pass (`blockscale::cuda::gemv_gated`); on the CPU two exact GEMVs into f32, their
    /// product in f32. The two matrices must have one scheme and shape.
    ///
    /// ```
    /// use blockscale::half::bf16;
    /// use blockscale::ndarray::{Array1, Array2};
    /// use blockscale::{Activation, Backend, Epilogue, QuantizeOptions, Scheme};
    ///
    /// let backend = Backend::cuda_if_available(0)?;
    /// let w = |s: usize| Array2::from_shape_fn((256, 512), move |(r, c)| ((r * 7 + c * s) % 13) as f32 - 6.0);
    /// let opts = QuantizeOptions::default();
    /// let gate = backend.prepare(&backend.quantize(w(1).view(), Scheme::NvFp4, &opts)?)?;
    /// let up = backend.prepare(&backend.quantize(w(3).view(), Scheme::NvFp4, &opts)?)?;
    /// let x = Array1::from_shape_fn(512, |c| bf16::from_f32((c % 5) as f32 * 0.25));
    /// let silu = Epilogue::default().with_activation(Activation::Silu);
    /// let h = backend.gemv_gated_prepared::<bf16, bf16>(x.view(), (&gate, &silu), (&up, &Epilogue::default()))?;
    /// assert_eq!(h.len(), 256);
    /// # Ok::<(), blockscale::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::GatedMismatch`] for matrices of different schemes or shapes, and as
    /// [`Backend::gemv_prepared`].
    pub fn gemv_gated_prepared<I: Element, O: Element>(
        &self,
        x: ArrayView1<'_, I>,
        (gate, gate_epilogue): (&Prepared, &Epilogue<'_>),
        (up, up_epilogue): (&Prepared, &Epilogue<'_>),
    ) -> Result<Array1<O>, Error> {
        let (g, u) = (gate.describe(), up.describe());
        if g != u {
            return Err(Error::GatedMismatch { gate: g, up: u });
        }
        match (self, gate, up) {
            (Self::Cpu, Prepared::Cpu(_), Prepared::Cpu(_)) => {
                let g: Array1<f32> = self.gemv_prepared(x, gate, gate_epilogue)?;
                let u: Array1<f32> = self.gemv_prepared(x, up, up_epilogue)?;
                Ok(g.iter().zip(&u).map(|(a, b)| O::from_f32(a * b)).collect())
            }
            #[cfg(feature = "cuda")]
            (Self::Cuda(dev), Prepared::Cuda(pg), Prepared::Cuda(pu)) => {
                let x = x.insert_axis(ndarray::Axis(0));
                let y = on_half!(I, x, F32_GEMV, |x| blockscale_cuda::gemv_gated_prepared_host::<_, O>(
                    dev,
                    x,
                    (pg, gate_epilogue),
                    (pu, up_epilogue)
                ))?;
                Ok(y.remove_axis(ndarray::Axis(0)))
            }
            #[cfg(feature = "cuda")]
            _ => Err(other_backend(self)),
        }
    }

    /// [`Backend::gemm_weight_only`] on weights [`Backend::prepare`] made (on this
    /// backend): prefill and batched decode on the weights the GEMV reads. On a GPU, up
    /// to 16 rows run the prepared GEMV, more the weight-only GEMM on prepared weights
    /// (`blockscale::cuda::gemm_weight_only_prepared`).
    ///
    /// ```
    /// use blockscale::half::bf16;
    /// use blockscale::ndarray::Array2;
    /// use blockscale::{Backend, Epilogue, QuantizeOptions, Scheme};
    ///
    /// let backend = Backend::cuda_if_available(0)?;
    /// let w = Array2::from_shape_fn((256, 512), |(r, c)| ((r * 7 + c) % 13) as f32 - 6.0);
    /// let prepared = backend.prepare(&backend.quantize(w.view(), Scheme::Int4G128, &QuantizeOptions::default())?)?;
    /// let x = Array2::from_shape_fn((40, 512), |(r, c)| bf16::from_f32(((r + c) % 5) as f32 * 0.25));
    /// let y = backend.gemm_weight_only_prepared::<bf16, f32>(x.view(), &prepared, &Epilogue::default())?;
    /// assert_eq!(y.dim(), (40, 256));
    /// # Ok::<(), blockscale::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Backend::gemm_weight_only`]; on the GPU f32 activations
    /// ([`Error::Unsupported`]: the prepared kernels read bf16 or f16); weights prepared
    /// on the other backend ([`Error::Unsupported`]).
    pub fn gemm_weight_only_prepared<I: Element, O: Element>(
        &self,
        x: ArrayView2<'_, I>,
        w: &Prepared,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, Error> {
        match (self, w) {
            (Self::Cpu, Prepared::Cpu(q)) => self.gemm_weight_only(x, q, epilogue),
            #[cfg(feature = "cuda")]
            (Self::Cuda(dev), Prepared::Cuda(p)) => on_half!(I, x, F32_PREPARED, |x| {
                blockscale_cuda::gemm_weight_only_prepared_host::<_, O>(dev, x, p, epilogue)
            }),
            #[cfg(feature = "cuda")]
            _ => Err(other_backend(self)),
        }
    }

    /// [`Backend::gemm`] on weights [`Backend::prepare`] made (on this backend): quantized
    /// activations `a` (`m x k`, NVFP4 or MX, e.g. quantized per step by the engine)
    /// times prepared weights (`n x k`). On a GPU the activations are decoded to bf16
    /// exactly on their way into the kernel and the weights in registers inside its main
    /// loop (`blockscale::cuda::gemm_prepared`); on the CPU it is [`Backend::gemm`].
    ///
    /// ```
    /// use blockscale::ndarray::Array2;
    /// use blockscale::{Backend, Epilogue, QuantizeOptions, Scheme};
    ///
    /// let backend = Backend::cuda_if_available(0)?;
    /// let opts = QuantizeOptions::default();
    /// let w = Array2::from_shape_fn((256, 512), |(r, c)| ((r * 7 + c) % 13) as f32 - 6.0);
    /// let prepared = backend.prepare(&backend.quantize(w.view(), Scheme::MxFp4, &opts)?)?;
    /// let x = Array2::from_shape_fn((40, 512), |(r, c)| ((r + c) % 5) as f32 * 0.25);
    /// let a = backend.quantize(x.view(), Scheme::MxFp8E4M3, &opts)?;
    /// let y = backend.gemm_prepared::<f32>(&a, &prepared, &Epilogue::default())?;
    /// assert_eq!(y.dim(), (40, 256));
    /// # Ok::<(), blockscale::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Backend::gemm`]; on the GPU FP8 block pairs (they read the weights' checkpoint
    /// layout: use [`Backend::gemm`]); weights prepared on the other backend
    /// ([`Error::Unsupported`]).
    pub fn gemm_prepared<O: Element>(
        &self,
        a: &QuantizedMatrix,
        w: &Prepared,
        epilogue: &Epilogue<'_>,
    ) -> Result<Array2<O>, Error> {
        match (self, w) {
            (Self::Cpu, Prepared::Cpu(q)) => self.gemm(a, q, epilogue),
            #[cfg(feature = "cuda")]
            (Self::Cuda(dev), Prepared::Cuda(p)) => Ok(blockscale_cuda::gemm_prepared_host(dev, a, p, epilogue)?),
            #[cfg(feature = "cuda")]
            _ => Err(other_backend(self)),
        }
    }
}

/// Weights prepared on one backend, used on another.
#[cfg(feature = "cuda")]
fn other_backend(backend: &Backend) -> Error {
    Error::Unsupported {
        backend: backend.name(),
        what: "weights prepared on another backend (prepare them with this one)",
    }
}

impl Prepared {
    /// Scheme, rows and K, for the gated GEMV's check.
    fn describe(&self) -> (Scheme, usize, usize) {
        match self {
            Self::Cpu(q) => (q.scheme(), q.rows(), q.k()),
            #[cfg(feature = "cuda")]
            Self::Cuda(p) => (p.scheme(), p.shape().0, p.shape().1),
        }
    }
}

/// A checkpoint's weight on a backend ([`Backend::load_weights`]).
#[cfg(feature = "checkpoint")]
#[derive(Debug)]
pub enum LoadedWeight {
    /// A library scheme's matrix, prepared ([`Backend::prepare`]): on a GPU already on
    /// the device in the fast kernels' layout.
    Prepared(Box<Prepared>),
    /// A format without a library scheme, decoded to f32 on the host, row-major in the
    /// found weight's `out_shape`.
    Values(Vec<f32>),
}

#[cfg(feature = "checkpoint")]
impl Backend {
    /// Every quantized weight of `reader`, in file order, read one at a time and
    /// prepared on this backend (on a GPU, copied onto the device in the layout of the
    /// fast GEMV and GEMM), with what was found about it. Memory on the host stays near
    /// one weight.
    ///
    /// ```no_run
    /// use blockscale::checkpoint::Reader;
    /// use blockscale::{Backend, LoadedWeight};
    ///
    /// let backend = Backend::cuda_if_available(0)?;
    /// let reader = Reader::open("model/".as_ref())?;
    /// for loaded in backend.load_weights(&reader) {
    ///     let (found, weight) = loaded?;
    ///     if let LoadedWeight::Prepared(w) = weight {
    ///         println!("{} on {}", found.output, backend.name());
    ///     }
    /// }
    /// # Ok::<(), blockscale::Error>(())
    /// ```
    ///
    /// # Errors
    /// Each item: [`Error::Checkpoint`] naming the file and tensor of a weight that
    /// cannot be read, or the backend's error from [`Backend::prepare`].
    pub fn load_weights<'r>(
        &'r self,
        reader: &'r blockscale_checkpoint::Reader,
    ) -> impl Iterator<Item = Result<(blockscale_checkpoint::Found, LoadedWeight), Error>> + 'r {
        reader.weights().map(move |loaded| {
            let loaded = loaded?;
            let weight = match loaded.weight {
                // gpt-oss experts come as one matrix, their [out, K] rows stacked (the
                // found weight's `transpose_experts` says how many).
                blockscale_checkpoint::Weight::Matrix { q, .. } => LoadedWeight::Prepared(Box::new(self.prepare(&q)?)),
                blockscale_checkpoint::Weight::Values(v) => LoadedWeight::Values(v),
            };
            Ok((loaded.found, weight))
        })
    }
}

/// Weights prepared by [`Backend::prepare`] for [`Backend::gemv_prepared`],
/// [`Backend::gemm_weight_only_prepared`] and [`Backend::gemm_prepared`].
#[derive(Debug)]
pub enum Prepared {
    /// The CPU's: the matrix itself.
    Cpu(QuantizedMatrix),
    /// The GPU's prepared layout on the device.
    #[cfg(feature = "cuda")]
    Cuda(blockscale_cuda::PreparedWeights),
}

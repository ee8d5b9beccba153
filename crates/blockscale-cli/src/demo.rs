//! Built-in demo weights for `eval --demo`: one transformer decoder layer (hidden size
//! 1024, grouped-query attention with 2 KV heads of 128, MLP width 1536), generated
//! from a fixed seed so that every machine evaluates exactly the same bf16 values.
//!
//! The values imitate what makes real checkpoints hard to quantize: heavy-tailed
//! elements (Student-t with 4 or 8 degrees of freedom), rows of different scale, a few
//! near-zero rows, and a few input channels (columns) 10-50x larger than the rest.
//!
//! Only IEEE-exact operations (`+ - * /`, `sqrt`) and integer arithmetic are used, never
//! `ln`, `exp` or `powf`, whose last bit depends on the platform's libm: the weights
//! are bit-identical on every target.

use blockscale::rng::SplitMix64;
use half::bf16;

/// One demo weight: a row-major `rows x k` bf16 matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoTensor {
    /// The tensor's name, as in a Hugging Face Llama-style checkpoint.
    pub name: String,
    /// Rows (output features).
    pub rows: usize,
    /// K (input features), the quantized dimension: a multiple of 128.
    pub k: usize,
    /// `rows * k` values, row-major.
    pub values: Vec<bf16>,
}

/// Hidden size of the demo layer.
const HIDDEN: usize = 1024;
/// Output features of `k_proj` and `v_proj` (2 KV heads of 128).
const KV: usize = 256;
/// MLP width.
const INTERMEDIATE: usize = 1536;

/// How one demo tensor is drawn.
struct Recipe {
    name: &'static str,
    rows: usize,
    k: usize,
    /// Degrees of freedom of the Student-t elements: 4 or 8.
    dof: u32,
    /// Input channels multiplied by 10-50x.
    outlier_cols: usize,
    /// Rows multiplied by 1e-3.
    quiet_rows: usize,
}

const RECIPES: [Recipe; 7] = [
    Recipe { name: "q_proj", rows: HIDDEN, k: HIDDEN, dof: 4, outlier_cols: 6, quiet_rows: 4 },
    Recipe { name: "k_proj", rows: KV, k: HIDDEN, dof: 4, outlier_cols: 6, quiet_rows: 2 },
    Recipe { name: "v_proj", rows: KV, k: HIDDEN, dof: 8, outlier_cols: 3, quiet_rows: 0 },
    Recipe { name: "o_proj", rows: HIDDEN, k: HIDDEN, dof: 8, outlier_cols: 2, quiet_rows: 3 },
    Recipe { name: "gate_proj", rows: INTERMEDIATE, k: HIDDEN, dof: 8, outlier_cols: 5, quiet_rows: 6 },
    Recipe { name: "up_proj", rows: INTERMEDIATE, k: HIDDEN, dof: 8, outlier_cols: 5, quiet_rows: 0 },
    Recipe { name: "down_proj", rows: HIDDEN, k: INTERMEDIATE, dof: 4, outlier_cols: 8, quiet_rows: 2 },
];

/// The seed every demo tensor derives its own stream from.
const SEED: u64 = 0x626c_6f63_6b73_6361; // "blocksca"

/// The demo layer's weights, always the same values: q/k/v/o projections of the
/// attention and gate/up/down projections of the MLP of `model.layers.0`
/// (7,340,032 weights, 14.7 MB of bf16).
pub fn tensors() -> Vec<DemoTensor> {
    RECIPES.iter().map(generate).collect()
}

fn full_name(short: &str) -> String {
    let block = if matches!(short, "gate_proj" | "up_proj" | "down_proj") { "mlp" } else { "self_attn" };
    format!("model.layers.0.{block}.{short}.weight")
}

fn generate(r: &Recipe) -> DemoTensor {
    let name = full_name(r.name);
    let mut rng = SplitMix64::new(SEED ^ fnv1a(name.as_bytes()));
    // Weights initialised at std ~ 1/sqrt(K) and trained away from it.
    let base = 1.0 / (r.k as f64).sqrt();

    let mut col_scale = vec![1.0f64; r.k];
    for _ in 0..r.outlier_cols {
        let c = rng.below(r.k);
        col_scale[c] = 10.0 + 40.0 * rng.unit_f64();
    }
    let mut row_scale: Vec<f64> = (0..r.rows)
        .map(|_| {
            // Most rows within 0.4-1.6x, one in twenty 2-3x louder.
            let s = 0.4 + 1.2 * rng.unit_f64();
            if rng.below(20) == 0 { s * (2.0 + rng.unit_f64()) } else { s }
        })
        .collect();
    for _ in 0..r.quiet_rows {
        let row = rng.below(r.rows);
        row_scale[row] = 1e-3;
    }

    let mut values = Vec::with_capacity(r.rows * r.k);
    for &rs in &row_scale {
        for &cs in &col_scale {
            let x = student_t(&mut rng, r.dof) * base * rs * cs;
            values.push(bf16::from_f64(x));
        }
    }
    DemoTensor { name, rows: r.rows, k: r.k, values }
}

/// FNV-1a over bytes: a stable per-tensor seed from its name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A Student-t variate scaled to unit variance, by Bailey's polar method: with
/// (u, v) uniform in the unit disc and w = u^2 + v^2, `u * sqrt(n (w^(-2/n) - 1) / w)`
/// is t-distributed with n degrees of freedom. For n = 4 and 8, w^(-2/n) is one or
/// two square roots: no libm function is involved.
fn student_t(rng: &mut SplitMix64, dof: u32) -> f64 {
    loop {
        let u = rng.uniform_f64(-1.0, 1.0);
        let v = rng.uniform_f64(-1.0, 1.0);
        let w = u * u + v * v;
        if w >= 1.0 || w == 0.0 {
            continue;
        }
        let root = match dof {
            4 => 1.0 / w.sqrt(),
            8 => 1.0 / w.sqrt().sqrt(),
            _ => unreachable!("demo recipes use 4 or 8 degrees of freedom"),
        };
        let n = f64::from(dof);
        let t = u * (n * (root - 1.0) / w).sqrt();
        // Var(t_n) = n / (n - 2).
        return t / (n / (n - 2.0)).sqrt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(v: &[bf16]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|x| x.to_f64()).sum::<f64>() / n;
        let m2 = v.iter().map(|x| (x.to_f64() - mean).powi(2)).sum::<f64>() / n;
        let m4 = v.iter().map(|x| (x.to_f64() - mean).powi(4)).sum::<f64>() / n;
        (m2, m4 / (m2 * m2))
    }

    #[test]
    fn same_values_every_time() {
        let a = tensors();
        let b = tensors();
        assert_eq!(a, b);
        // Different tensors draw from different streams.
        assert_ne!(a[0].values[..1024], a[3].values[..1024]);
    }

    #[test]
    fn llama_style_names_and_block_friendly_shapes() {
        let t = tensors();
        assert_eq!(t.len(), 7);
        let names: Vec<&str> = t.iter().map(|t| t.name.as_str()).collect();
        assert!(names.contains(&"model.layers.0.self_attn.q_proj.weight"));
        assert!(names.contains(&"model.layers.0.mlp.down_proj.weight"));
        let total: usize = t.iter().map(|t| t.values.len()).sum();
        assert!((2_000_000..10_000_000).contains(&total), "{total} weights");
        for t in &t {
            assert_eq!(t.values.len(), t.rows * t.k, "{}", t.name);
            assert_eq!(t.k % 128, 0, "{}", t.name);
            assert_eq!(t.rows % 128, 0, "{}", t.name);
            assert!(t.values.iter().all(|x| x.is_finite()), "{}", t.name);
        }
    }

    #[test]
    fn heavy_tails() {
        for t in tensors() {
            // Element-wise (the outlier columns alone would make any tensor leptokurtic,
            // so look at an ordinary row's elements outside them too).
            let (_, kurt) = moments(&t.values);
            assert!(kurt > 6.0, "{}: kurtosis {kurt}", t.name);
        }
        // Without outlier columns, the t(4)/t(8) elements are still far from Gaussian:
        // the largest of a million draws is many standard deviations out.
        let mut rng = SplitMix64::new(1);
        let draws: Vec<bf16> = (0..1_000_000).map(|_| bf16::from_f64(student_t(&mut rng, 8))).collect();
        let (var, kurt) = moments(&draws);
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        assert!(kurt > 4.0, "t(8) kurtosis {kurt} (4.5 expected)");
        let amax = draws.iter().map(|x| x.to_f64().abs()).fold(0.0, f64::max);
        assert!(amax > 7.0, "max |t(8)| {amax}");
    }

    #[test]
    fn outlier_columns_and_quiet_rows() {
        for t in tensors() {
            let mut col_rms = vec![0f64; t.k];
            for row in t.values.chunks_exact(t.k) {
                for (c, x) in col_rms.iter_mut().zip(row) {
                    *c += x.to_f64().powi(2);
                }
            }
            let mut sorted = col_rms.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[t.k / 2];
            let loud = col_rms.iter().filter(|&&c| c > 50.0 * median).count();
            assert!(loud >= 1, "{}: no outlier column", t.name);
            assert!(loud <= 8, "{}: {loud} outlier columns", t.name);

            let row_rms: Vec<f64> =
                t.values.chunks_exact(t.k).map(|r| r.iter().map(|x| x.to_f64().powi(2)).sum::<f64>()).collect();
            let mut sorted = row_rms.clone();
            sorted.sort_by(f64::total_cmp);
            let (lo, hi) = (sorted[t.rows / 10], sorted[t.rows * 9 / 10]);
            assert!(hi > 2.0 * lo, "{}: rows all alike", t.name);
        }
        let quiet = |t: &DemoTensor| {
            let first = t.values.chunks_exact(t.k).map(|r| r.iter().map(|x| x.to_f64().abs()).fold(0.0, f64::max));
            let amax = t.values.iter().map(|x| x.to_f64().abs()).fold(0.0, f64::max);
            first.filter(|&m| m < amax * 1e-3).count()
        };
        let t = tensors();
        assert!(t.iter().map(quiet).sum::<usize>() >= 5, "near-zero rows missing");
    }
}

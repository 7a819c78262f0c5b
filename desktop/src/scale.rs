//! Resizing packed 8-bit images with a triangle filter: bilinear when enlarging, widened to the
//! scale factor when shrinking so every source pixel contributes (no aliasing of thin text
//! strokes). Separable, in 16-bit fixed-point arithmetic so the compiler can vectorise it with
//! plain SSE2: a vertical pass over whole rows, then a horizontal pass over the fewer rows left.

/// Weights are multiples of 1/256 (8 bits), so a weighted sum of 8-bit values fits in a u16:
/// every weight is non-negative and a destination's weights sum to exactly `ONE`, hence
/// `sum(w * v) <= 255 * 256 = 65280`, and `65280 + HALF < 65536`.
const SHIFT: u32 = 8;
const ONE: u16 = 1 << SHIFT;
const HALF: u16 = 1 << (SHIFT - 1);

/// The source pixels and weights that make each destination pixel along one axis.
struct Taps {
    /// First source index (with a non-zero weight) for each destination index.
    starts: Vec<usize>,
    /// Number of weights for each destination index.
    lens: Vec<usize>,
    /// Destination `i`'s weights are `weights[i * stride..][..lens[i]]`.
    weights: Vec<u16>,
    stride: usize,
}

impl Taps {
    /// Weights for resampling `src` pixels to `dst` (both non-zero).
    fn new(src: usize, dst: usize) -> Taps {
        let scale = src as f64 / dst as f64;
        let support = scale.max(1.0);
        let stride = (2.0 * support).ceil() as usize + 1;
        let mut taps = Taps {
            starts: Vec::with_capacity(dst),
            lens: Vec::with_capacity(dst),
            weights: vec![0; dst * stride],
            stride,
        };
        for i in 0..dst {
            // Pixel j covers [j, j + 1) and is sampled at its centre j + 0.5.
            let center = (i as f64 + 0.5) * scale;
            let first = ((center - support).floor().max(0.0) as usize).min(src - 1);
            let last = ((center + support).ceil() as usize).clamp(first + 1, src);
            let raw: Vec<f64> = (first..last)
                .take(stride)
                .map(|j| (1.0 - (j as f64 + 0.5 - center).abs() / support).max(0.0))
                .collect();
            let sum: f64 = raw.iter().sum();
            let row = &mut taps.weights[i * stride..(i + 1) * stride];
            if sum > 0.0 {
                for (slot, w) in row.iter_mut().zip(&raw) {
                    *slot = (w / sum * f64::from(ONE)).round() as u16;
                }
            } else {
                row[0] = ONE;
            }
            // Give the rounding error to the largest weight so each row sums to exactly ONE; the
            // largest is at least ONE / stride, far above the error, so it stays non-negative.
            let total: i32 = row.iter().map(|&w| i32::from(w)).sum();
            if let Some(max) = row.iter_mut().max_by_key(|w| **w) {
                *max = u16::try_from(i32::from(*max) + i32::from(ONE) - total).unwrap_or(ONE);
            }
            // Drop zero weights at both ends so the loops only touch contributing pixels.
            let lead = row.iter().position(|&w| w != 0).unwrap_or(0);
            let len = row.iter().rposition(|&w| w != 0).map_or(1, |p| p + 1) - lead;
            row.copy_within(lead..lead + len, 0);
            taps.starts.push(first + lead);
            taps.lens.push(len);
        }
        taps
    }

    /// Destination `i`'s first source index and weights; they never reach past the source
    /// (`Taps::new` takes at most `src - first` of them).
    fn get(&self, i: usize) -> (usize, &[u16]) {
        let offset = i * self.stride;
        (self.starts[i], &self.weights[offset..offset + self.lens[i]])
    }
}

/// Rounds a weighted sum back to 8 bits (the sum is at most 255 * ONE, see [`SHIFT`]).
fn round(acc: u16) -> u8 {
    (acc.wrapping_add(HALF) >> SHIFT) as u8
}

/// Resizes an image of `C` interleaved 8-bit channels from `src_w x src_h` to `dst_w x dst_h`.
/// All sizes must be non-zero and `src.len()` must be `src_w * src_h * C` (callers check).
pub(crate) fn resize<const C: usize>(
    src: &[u8],
    (src_w, src_h): (usize, usize),
    (dst_w, dst_h): (usize, usize),
) -> Vec<u8> {
    let vertical = if dst_h == src_h {
        src.to_vec()
    } else {
        resize_vertically(src, src_w * C, src_h, dst_h)
    };
    if dst_w == src_w {
        return vertical;
    }
    let taps = Taps::new(src_w, dst_w);
    match taps.stride {
        2 => resize_horizontally::<C, 2>(&vertical, src_w, dst_w, &taps),
        3 => resize_horizontally::<C, 3>(&vertical, src_w, dst_w, &taps),
        4 => resize_horizontally::<C, 4>(&vertical, src_w, dst_w, &taps),
        5 => resize_horizontally::<C, 5>(&vertical, src_w, dst_w, &taps),
        6 => resize_horizontally::<C, 6>(&vertical, src_w, dst_w, &taps),
        _ => resize_horizontally_any::<C>(&vertical, src_w, dst_w, &taps),
    }
}

/// The horizontal pass with `N` taps per destination pixel (known at compile time, so the
/// inner loops unroll): every window is widened to `N` source pixels with zero weights, moved
/// left where it would run past the row's end.
fn resize_horizontally<const C: usize, const N: usize>(
    src: &[u8],
    src_w: usize,
    dst_w: usize,
    taps: &Taps,
) -> Vec<u8> {
    if src_w < N {
        return resize_horizontally_any::<C>(src, src_w, dst_w, taps);
    }
    let mut starts = Vec::with_capacity(dst_w);
    let mut weights = vec![[0u16; N]; dst_w];
    for (x, padded) in weights.iter_mut().enumerate() {
        let (start, w) = taps.get(x);
        let shifted = start.min(src_w - N);
        // `Taps::new` keeps every window inside the row, so `start + w.len() <= src_w` and the
        // weights land within the N slots.
        for (slot, &w) in padded.iter_mut().skip(start - shifted).zip(w) {
            *slot = w;
        }
        starts.push(shifted * C);
    }
    let rows = src.len() / (src_w * C);
    let mut out = vec![0u8; dst_w * rows * C];
    for (src_row, out_row) in src
        .chunks_exact(src_w * C)
        .zip(out.chunks_exact_mut(dst_w * C))
    {
        for ((out_px, &start), w) in out_row.chunks_exact_mut(C).zip(&starts).zip(&weights) {
            let Some(window) = src_row.get(start..start + N * C) else {
                continue;
            };
            let mut acc = [0u16; C];
            for (px, &w) in window.chunks_exact(C).zip(w) {
                for c in 0..C {
                    acc[c] = acc[c].wrapping_add(w.wrapping_mul(u16::from(px[c])));
                }
            }
            for c in 0..C {
                out_px[c] = round(acc[c]);
            }
        }
    }
    out
}

/// The horizontal pass for any number of taps.
fn resize_horizontally_any<const C: usize>(
    src: &[u8],
    src_w: usize,
    dst_w: usize,
    taps: &Taps,
) -> Vec<u8> {
    let rows = src.len() / (src_w * C);
    let mut out = vec![0u8; dst_w * rows * C];
    for (src_row, out_row) in src
        .chunks_exact(src_w * C)
        .zip(out.chunks_exact_mut(dst_w * C))
    {
        for (x, out_px) in out_row.chunks_exact_mut(C).enumerate() {
            let (start, weights) = taps.get(x);
            let Some(window) = src_row.get(start * C..(start + weights.len()) * C) else {
                continue;
            };
            let mut acc = [0u16; C];
            for (px, &w) in window.chunks_exact(C).zip(weights) {
                for c in 0..C {
                    acc[c] = acc[c].wrapping_add(w.wrapping_mul(u16::from(px[c])));
                }
            }
            for c in 0..C {
                out_px[c] = round(acc[c]);
            }
        }
    }
    out
}

/// Resamples rows of `row_len` bytes from `src_h` rows to `dst_h` rows.
fn resize_vertically(src: &[u8], row_len: usize, src_h: usize, dst_h: usize) -> Vec<u8> {
    let taps = Taps::new(src_h, dst_h);
    let mut out = vec![0u8; row_len * dst_h];
    let mut acc = vec![0u16; row_len];
    for (y, out_row) in out.chunks_exact_mut(row_len).enumerate() {
        let (start, weights) = taps.get(y);
        acc.fill(0);
        let rows = src[start * row_len..].chunks_exact(row_len);
        for (row, &w) in rows.zip(weights) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = a.wrapping_add(w.wrapping_mul(u16::from(v)));
            }
        }
        for (o, &a) in out_row.iter_mut().zip(&acc) {
            *o = round(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_stay_inside_the_source() {
        for (src, dst) in [
            (1280, 1024),
            (800, 640),
            (1280, 1280),
            (100, 7),
            (7, 100),
            (3, 1),
        ] {
            let taps = Taps::new(src, dst);
            for i in 0..dst {
                let (start, weights) = taps.get(i);
                assert_eq!(weights.iter().sum::<u16>(), ONE, "{src}->{dst} at {i}");
                assert!(start + weights.len() <= src, "{src}->{dst} at {i}");
                assert!(weights.first() != Some(&0) && weights.last() != Some(&0));
            }
        }
    }

    #[test]
    fn the_unrolled_horizontal_pass_matches_the_general_one() {
        let (src_w, rows) = (97, 3);
        let src: Vec<u8> = (0..src_w * rows * 4)
            .map(|i| (i * 37 % 256) as u8)
            .collect();
        for dst_w in [96, 80, 64, 50, 33, 120] {
            let taps = Taps::new(src_w, dst_w);
            let general = resize_horizontally_any::<4>(&src, src_w, dst_w, &taps);
            let unrolled = resize::<4>(&src, (src_w, rows), (dst_w, rows));
            assert_eq!(
                unrolled, general,
                "{src_w} -> {dst_w} (stride {})",
                taps.stride
            );
        }
    }

    #[test]
    fn flat_colour_stays_flat() {
        let src: Vec<u8> = [12u8, 200, 99].repeat(40 * 30);
        let out = resize::<3>(&src, (40, 30), (17, 11));
        assert_eq!(out.len(), 17 * 11 * 3);
        assert!(out.chunks_exact(3).all(|px| px == [12, 200, 99]));
        let out = resize::<3>(&src, (40, 30), (80, 45));
        assert!(out.chunks_exact(3).all(|px| px == [12, 200, 99]));
    }

    #[test]
    fn halving_averages_neighbours() {
        // One row: black, white, black, white... halves to mid grey away from the edges, where
        // the filter is cut off.
        let src: Vec<u8> = (0..16).map(|i| if i % 2 == 0 { 0 } else { 255 }).collect();
        let out = resize::<1>(&src, (16, 1), (8, 1));
        assert!(
            out[1..7].iter().all(|&v| (120..=135).contains(&v)),
            "{out:?}"
        );
    }
}

//! `spartac propagate --plot sparsity.png`: a bar chart of every weight's density before
//! and after propagation, drawn into an RGB buffer with the public-domain 8×8 glyphs of
//! `font8x8` and encoded with `png`. Small on purpose: no plotting library.

use anyhow::{Context, Result};
use spartac::propagate::PropagateReport;
use std::path::Path;

/// At most this many bars; beyond it the largest density changes are shown.
pub const MAX_BARS: usize = 60;

pub const BEFORE: [u8; 3] = [158, 171, 191];
pub const AFTER: [u8; 3] = [214, 96, 39];
const BACKGROUND: [u8; 3] = [255, 255, 255];
const INK: [u8; 3] = [33, 33, 33];
const MUTED: [u8; 3] = [110, 110, 110];
const GRID: [u8; 3] = [226, 226, 226];

const LABEL_CHARS: usize = 36;
const LABEL_W: usize = LABEL_CHARS * 8 + 16;
const PLOT_W: usize = 560;
const NUMBERS_W: usize = 136;
const WIDTH: usize = LABEL_W + PLOT_W + NUMBERS_W;
const ROW_H: usize = 18;
const TOP: usize = 84;
const BOTTOM: usize = 52;

/// One weight tensor's bar pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub name: String,
    pub before: f64,
    pub after: f64,
}

/// What the plot shows: the weights in graph order and the totals.
#[derive(Clone, Debug, PartialEq)]
pub struct SparsityPlot {
    pub model: String,
    pub bars: Vec<Bar>,
    /// Weight density (kept fraction) of the whole model before and after.
    pub total: (f64, f64),
}

impl SparsityPlot {
    /// The plot of `report` for the model file `model` (titled with its file name).
    pub fn from_report(model: &Path, report: &PropagateReport) -> SparsityPlot {
        let bars = report
            .tensors
            .iter()
            .filter(|t| t.is_weight)
            .map(|t| Bar { name: t.name.clone(), before: t.density_before, after: t.density_after })
            .collect();
        let model = model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        SparsityPlot { model, bars, total: report.weight_density() }
    }

    /// The bars drawn: all, or the [`MAX_BARS`] with the largest change (then the lowest
    /// density after), in graph order.
    fn shown(&self) -> Vec<&Bar> {
        let mut idx: Vec<usize> = (0..self.bars.len()).collect();
        if idx.len() > MAX_BARS {
            let change = |i: &usize| (self.bars[*i].before - self.bars[*i].after).abs();
            // Among equal changes (often none), the sparsest weights say the most.
            let after = |i: &usize| self.bars[*i].after;
            idx.sort_by(|a, b| change(b).total_cmp(&change(a)).then(after(a).total_cmp(&after(b))).then(a.cmp(b)));
            idx.truncate(MAX_BARS);
            idx.sort();
        }
        idx.into_iter().map(|i| &self.bars[i]).collect()
    }

    /// The chart as an RGB canvas.
    pub fn render(&self) -> Canvas {
        let shown = self.shown();
        let height = TOP + ROW_H * shown.len().max(1) + BOTTOM;
        let mut c = Canvas::new(WIDTH, height);
        let (before, after) = self.total;
        let title = format!("weight density per tensor: {}", self.model);
        c.text(16, 12, &fit(&title, (WIDTH - 32) / 16), INK, 2);
        let mut sub = format!(
            "total weight sparsity {:.2}% -> {:.2}% (density {:.4} -> {:.4})",
            100.0 * (1.0 - before),
            100.0 * (1.0 - after),
            before,
            after
        );
        if shown.len() < self.bars.len() {
            sub += &format!("; the {} of {} weights that changed most", shown.len(), self.bars.len());
        }
        c.text(16, 38, &fit(&sub, (WIDTH - 32) / 8), MUTED, 1);
        // Legend.
        let (lx, ly) = (LABEL_W, 58);
        c.fill(lx, ly, 14, 10, BEFORE);
        c.text(lx + 20, ly + 1, "before propagation", INK, 1);
        c.fill(lx + 190, ly, 14, 10, AFTER);
        c.text(lx + 210, ly + 1, "after propagation", INK, 1);
        c.text(LABEL_W + PLOT_W + 12, ly + 1, "before->after", MUTED, 1);

        let plot_top = TOP;
        let plot_bottom = TOP + ROW_H * shown.len().max(1);
        let x_of = |d: f64| LABEL_W + (d.clamp(0.0, 1.0) * (PLOT_W - 1) as f64).round() as usize;
        for tick in 0..=4 {
            let x = x_of(tick as f64 / 4.0);
            c.fill(x, plot_top, 1, plot_bottom - plot_top, GRID);
            c.fill(x, plot_bottom, 1, 5, INK);
            let label = format!("{}", tick as f64 / 4.0);
            c.text((x + 1).saturating_sub(label.len() * 4), plot_bottom + 9, &label, INK, 1);
        }
        c.fill(LABEL_W, plot_bottom, PLOT_W, 1, INK);
        c.fill(LABEL_W, plot_top, 1, plot_bottom - plot_top, INK);
        let axis = "density (fraction of elements kept)";
        c.text(LABEL_W + PLOT_W / 2 - axis.len() * 4, plot_bottom + 26, axis, INK, 1);
        if shown.is_empty() {
            c.text(LABEL_W + 12, plot_top + 5, "no weight tensors", MUTED, 1);
        }
        for (row, bar) in shown.iter().enumerate() {
            let y = plot_top + row * ROW_H;
            c.text(8, y + 5, &fit_tail(&bar.name, LABEL_CHARS), INK, 1);
            c.fill(LABEL_W + 1, y + 2, x_of(bar.before) - LABEL_W, 7, BEFORE);
            c.fill(LABEL_W + 1, y + 9, x_of(bar.after) - LABEL_W, 7, AFTER);
            let numbers = format!("{:.2}->{:.2}", bar.before, bar.after);
            let color = if bar.after < bar.before { AFTER } else { MUTED };
            c.text(LABEL_W + PLOT_W + 12, y + 5, &numbers, color, 1);
        }
        c
    }

    /// Renders and writes the PNG atomically (a temporary file renamed into place).
    pub fn write_png(&self, path: &Path) -> Result<()> {
        let bytes = self.render().to_png()?;
        Ok(spartac::output::write_atomic(path, &bytes)?)
    }
}

/// `s` cut to `max` characters, ending in ".." when cut.
fn fit(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max.saturating_sub(2)).chain("..".chars()).collect()
    }
}

/// `s` cut to its last `max` characters, starting with ".." when cut (tensor names say
/// the most at their end).
fn fit_tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        s.to_string()
    } else {
        "..".chars().chain(s.chars().skip(n - max + 2)).collect()
    }
}

/// An RGB image, row-major, 3 bytes a pixel.
pub struct Canvas {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

impl Canvas {
    pub fn new(width: usize, height: usize) -> Canvas {
        Canvas { width, height, rgb: BACKGROUND.repeat(width * height) }
    }

    /// Fills a rectangle, clipped to the canvas.
    pub fn fill(&mut self, x: usize, y: usize, w: usize, h: usize, color: [u8; 3]) {
        for yy in y..(y + h).min(self.height) {
            for xx in x..(x + w).min(self.width) {
                let i = 3 * (yy * self.width + xx);
                self.rgb[i..i + 3].copy_from_slice(&color);
            }
        }
    }

    /// Draws ASCII text with its top left at (x, y), each glyph pixel `scale` wide;
    /// other characters show as `?`.
    pub fn text(&mut self, x: usize, y: usize, s: &str, color: [u8; 3], scale: usize) {
        for (k, ch) in s.chars().enumerate() {
            let code = if ch.is_ascii() && !ch.is_ascii_control() { ch as usize } else { '?' as usize };
            let glyph = font8x8::legacy::BASIC_LEGACY[code];
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 1 {
                        self.fill(x + (k * 8 + col) * scale, y + row * scale, scale, scale, color);
                    }
                }
            }
        }
    }

    pub fn to_png(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width as u32, self.height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().context("encoding the plot")?;
        writer.write_image_data(&self.rgb).context("encoding the plot")?;
        writer.finish().context("encoding the plot")?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    fn has_color(rgb: &[u8], color: [u8; 3]) -> bool {
        rgb.chunks_exact(3).any(|p| p == color)
    }

    fn bars(n: usize) -> Vec<Bar> {
        (0..n)
            .map(|i| Bar { name: format!("layer.{i}.weight"), before: 1.0, after: 1.0 - i as f64 / n as f64 })
            .collect()
    }

    #[test]
    fn renders_a_readable_png_with_both_bar_colors() {
        let plot = SparsityPlot { model: "tiny".into(), bars: bars(3), total: (1.0, 0.6) };
        let dir = std::env::temp_dir().join(format!("spartac-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sparsity.png");
        plot.write_png(&path).unwrap();
        let (w, h, rgb) = decode(&std::fs::read(&path).unwrap());
        assert_eq!((w as usize, h as usize), (WIDTH, TOP + 3 * ROW_H + BOTTOM));
        assert!(has_color(&rgb, BEFORE) && has_color(&rgb, AFTER) && has_color(&rgb, INK));
        assert!(!dir.join("sparsity.png.tmp").exists());
        // Nothing pruned: no "after" bar is shorter, but the legend still has the color;
        // the bar area of the first row is the before color at its left end.
        let row0 = TOP + 4;
        assert_eq!(&rgb[3 * (row0 * WIDTH + LABEL_W + 3)..][..3], &BEFORE);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn many_weights_show_the_largest_changes() {
        let plot = SparsityPlot { model: "big".into(), bars: bars(100), total: (1.0, 0.5) };
        let shown = plot.shown();
        assert_eq!(shown.len(), MAX_BARS);
        assert_eq!(shown[0].name, "layer.40.weight", "graph order among the largest changes");
        let (_, h, _) = decode(&plot.render().to_png().unwrap());
        assert_eq!(h as usize, TOP + MAX_BARS * ROW_H + BOTTOM);
        assert_eq!(fit_tail("abcdefgh", 5), "..fgh");
        assert_eq!(fit("abcdefgh", 5), "abc..");
    }

    #[test]
    fn unwritable_path_is_a_one_line_error() {
        let plot = SparsityPlot { model: "m".into(), bars: bars(1), total: (1.0, 1.0) };
        let e = plot.write_png(Path::new("/nonexistent-dir/x.png")).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("cannot write /nonexistent-dir/x.png") && !msg.contains('\n'), "{msg}");
    }
}

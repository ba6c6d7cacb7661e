//! `spartac propagate --plot sparsity.png`: a bar chart of every weight's density before
//! and after propagation; `spartac tune --plot`: predicted against measured kernel times
//! ([`ScatterPlot`]). Drawn into an RGB buffer with the public-domain 8×8 glyphs of
//! `font8x8` and encoded with `png`. Small on purpose: no plotting library. `plotters`
//! 0.3.7 was tried (issue 28): without system fontconfig/freetype it draws no text, and
//! with `ab_glyph` it needs an embedded font (+1.1 MB stripped binary) and spaces glyphs
//! unevenly ("0.6380" reads "0. 6380").

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
        c.title(&title);
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

/// `spartac tune --plot`: one point per (predicted, measured) pair on log-log axes, a series
/// per color, and the diagonal where prediction equals measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterPlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// One color of a [`ScatterPlot`]: its legend and `(x, y)` points (those with a coordinate of
/// zero or less are left out).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub legend: String,
    pub color: [u8; 3],
    pub points: Vec<(f64, f64)>,
}

const SCATTER_SIDE: usize = 520;
const SCATTER_LEFT: usize = 96;
const SCATTER_TOP: usize = 84;

impl ScatterPlot {
    /// The decades the axes span: from below the smallest value to above the largest.
    fn decades(&self) -> (i32, i32) {
        let shown = self.series.iter().flat_map(|s| &s.points).filter(|(x, y)| *x > 0.0 && *y > 0.0);
        let values = shown.flat_map(|&(x, y)| [x, y]);
        let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if !lo.is_finite() {
            return (-6, -3);
        }
        let (lo, hi) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        (lo, hi.max(lo + 1))
    }

    /// The chart as an RGB canvas.
    pub fn render(&self) -> Canvas {
        let width = SCATTER_LEFT + SCATTER_SIDE + 32;
        let height = SCATTER_TOP + SCATTER_SIDE + 64;
        let mut c = Canvas::new(width, height);
        c.title(&self.title);
        let n: usize = self.series.iter().map(|s| s.points.len()).sum();
        c.text(16, 38, &format!("{n} points, log-log; on the diagonal the model is exact"), MUTED, 1);
        let mut lx = SCATTER_LEFT;
        for s in &self.series {
            c.fill(lx, 58, 10, 10, s.color);
            c.text(lx + 16, 59, &s.legend, INK, 1);
            lx += 16 + s.legend.len() * 8 + 24;
        }
        let (lo, hi) = self.decades();
        let span = (hi - lo) as f64;
        let pos = |v: f64| ((v.log10() - lo as f64) / span * (SCATTER_SIDE - 1) as f64).round() as usize;
        let (x0, y_bottom) = (SCATTER_LEFT, SCATTER_TOP + SCATTER_SIDE - 1);
        for d in lo..=hi {
            let p = pos(10f64.powi(d));
            c.fill(x0 + p, SCATTER_TOP, 1, SCATTER_SIDE, GRID);
            c.fill(x0, y_bottom - p, SCATTER_SIDE, 1, GRID);
            let label = seconds_label(d);
            c.text((x0 + p).saturating_sub(label.len() * 4), y_bottom + 8, &label, INK, 1);
            c.text(x0.saturating_sub(label.len() * 8 + 6), (y_bottom - p).saturating_sub(4), &label, INK, 1);
        }
        // The diagonal, then the axes over it.
        for i in 0..SCATTER_SIDE {
            c.fill(x0 + i, y_bottom - i, 1, 1, MUTED);
        }
        c.fill(x0, y_bottom, SCATTER_SIDE, 1, INK);
        c.fill(x0, SCATTER_TOP, 1, SCATTER_SIDE, INK);
        c.text(x0 + SCATTER_SIDE / 2 - self.x_label.len() * 4, y_bottom + 28, &self.x_label, INK, 1);
        c.text(8, SCATTER_TOP - 16, &self.y_label, INK, 1);
        for s in &self.series {
            for &(x, y) in s.points.iter().filter(|(x, y)| *x > 0.0 && *y > 0.0) {
                let (px, py) = (x0 + pos(x).min(SCATTER_SIDE - 1), y_bottom - pos(y).min(SCATTER_SIDE - 1));
                c.fill(px.saturating_sub(2), py.saturating_sub(2), 5, 5, s.color);
            }
        }
        c
    }

    /// Renders and writes the PNG atomically.
    pub fn write_png(&self, path: &Path) -> Result<()> {
        let bytes = self.render().to_png()?;
        Ok(spartac::output::write_atomic(path, &bytes)?)
    }
}

/// `10^d` seconds as a short label: `1us`, `100ms`, `10s`.
fn seconds_label(d: i32) -> String {
    let (unit, base) = match d {
        i32::MIN..=-7 => return format!("1e{d}s"),
        -6..=-4 => ("us", -6),
        -3..=-1 => ("ms", -3),
        _ => ("s", 0),
    };
    format!("{}{unit}", 10u64.pow((d - base).clamp(0, 18) as u32))
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

/// A title for a canvas `width` pixels wide, with its glyph scale: 2 where it fits,
/// else 1, cut only where even that is too wide (the end often names the model).
fn title_layout(title: &str, width: usize) -> (String, usize) {
    let room = width.saturating_sub(32);
    if title.chars().count() * 16 <= room {
        (title.to_string(), 2)
    } else {
        (fit(title, room / 8), 1)
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

    /// Draws a chart's title in the band above the subtitle (see [`title_layout`]).
    pub fn title(&mut self, title: &str) {
        let (text, scale) = title_layout(title, self.width);
        // A smaller title sits in the middle of the 16-pixel band.
        self.text(16, 12 + 4 * (2 - scale), &text, INK, scale);
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
    fn scatter_plot_spans_the_decades_of_its_points() {
        let plot = ScatterPlot {
            title: "t".into(),
            x_label: "predicted".into(),
            y_label: "measured".into(),
            series: vec![
                Series {
                    legend: "before".into(),
                    color: BEFORE,
                    points: vec![(2e-6, 3e-6), (40e-6, 20e-6), (0.0, 1.0)],
                },
                Series { legend: "after".into(), color: AFTER, points: vec![(3e-6, 3e-6)] },
            ],
        };
        assert_eq!(plot.decades(), (-6, -4));
        let (w, h, rgb) = decode(&plot.render().to_png().unwrap());
        assert_eq!((w as usize, h as usize), (SCATTER_LEFT + SCATTER_SIDE + 32, SCATTER_TOP + SCATTER_SIDE + 64));
        assert!(has_color(&rgb, BEFORE) && has_color(&rgb, AFTER));
        assert_eq!(seconds_label(-5), "10us");
        assert_eq!(seconds_label(-3), "1ms");
        let empty = ScatterPlot { series: vec![], ..plot };
        assert_eq!(empty.decades(), (-6, -3));
    }

    #[test]
    fn a_long_title_shrinks_before_it_is_cut() {
        let width = SCATTER_LEFT + SCATTER_SIDE + 32;
        assert_eq!(title_layout("short", width), ("short".to_string(), 2));
        let tune = "spartac tune: predicted vs measured, minilm-l6.onnx";
        assert_eq!(title_layout(tune, width), (tune.to_string(), 1));
        let (cut, scale) = title_layout(&"x".repeat(100), width);
        assert_eq!((cut.chars().count(), scale), ((width - 32) / 8, 1));
        assert!(cut.ends_with(".."));
    }

    #[test]
    fn unwritable_path_is_a_one_line_error() {
        let plot = SparsityPlot { model: "m".into(), bars: bars(1), total: (1.0, 1.0) };
        let e = plot.write_png(Path::new("/nonexistent-dir/x.png")).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("cannot write /nonexistent-dir/x.png") && !msg.contains('\n'), "{msg}");
    }
}

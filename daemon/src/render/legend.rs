//! The colour legend of every chart: swatches with their labels in rows above the plot,
//! wrapped so no entry runs past the chart's right edge, and the height the rows take
//! (the plot starts below them, so the legend never covers data).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

#[cfg(test)]
use super::chart::FAIL;
use super::chart::{err, DrawResult, NOTE, PEAK};

/// What a legend entry's swatch looks like.
pub(crate) enum Swatch {
    /// A line with its min–max band.
    Band(RGBColor),
    /// A solid line.
    Line(RGBColor),
    /// A dashed line.
    Dashed(RGBColor),
    /// A failure mark in its tone's colour.
    Triangle(RGBColor),
    Dot,
    Tick,
}

const ROW_H: i32 = 20;
const LEFT: i32 = 96;
/// Average advance of a 13 px sans-serif character (DejaVu Sans is wider than most).
const CHAR_W: f64 = 7.6;

fn entry_width(text: &str) -> i32 {
    22 + (CHAR_W * text.chars().count() as f64).ceil() as i32 + 20
}

/// The entries' (x, row) positions in a chart `width` pixels wide.
fn layout(width: i32, items: &[(Swatch, String)]) -> Vec<(i32, i32)> {
    let right = width - 12;
    let (mut x, mut row) = (LEFT, 0);
    items
        .iter()
        .map(|(_, text)| {
            let w = entry_width(text);
            if x > LEFT && x + w > right {
                x = LEFT;
                row += 1;
            }
            let at = (x, row);
            x += w;
            at
        })
        .collect()
}

/// Pixels the legend of `items` takes above the plot of a chart `width` wide.
pub(crate) fn height(width: u32, items: &[(Swatch, String)]) -> u32 {
    let rows = layout(width as i32, items).last().map_or(0, |l| l.1 + 1);
    (rows * ROW_H) as u32 + 8
}

/// Draws the legend rows at the top of `root`.
pub(crate) fn draw(
    root: &DrawingArea<SVGBackend, Shift>,
    items: &[(Swatch, String)],
) -> DrawResult<()> {
    let width = root.dim_in_pixel().0 as i32;
    let font = ("sans-serif", 13).into_font().color(&RGBColor(30, 30, 30));
    for ((sw, text), (x, row)) in items.iter().zip(layout(width, items)) {
        let y = 16 + row * ROW_H;
        match sw {
            Swatch::Band(c) => root
                .draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled()))
                .map_err(err)?,
            Swatch::Line(c) => root
                .draw(&PathElement::new(
                    vec![(x, y), (x + 16, y)],
                    c.stroke_width(3),
                ))
                .map_err(err)?,
            Swatch::Dashed(c) => {
                for k in 0..3 {
                    root.draw(&PathElement::new(
                        vec![(x + 6 * k, y), (x + 6 * k + 4, y)],
                        c.stroke_width(3),
                    ))
                    .map_err(err)?;
                }
            }
            Swatch::Triangle(c) => root
                .draw(&TriangleMarker::new((x + 8, y), 6, c.filled()))
                .map_err(err)?,
            Swatch::Dot => root
                .draw(&Circle::new((x + 8, y), 5, PEAK.filled()))
                .map_err(err)?,
            Swatch::Tick => root
                .draw(&PathElement::new(
                    vec![(x + 8, y - 7), (x + 8, y + 7)],
                    NOTE.stroke_width(2),
                ))
                .map_err(err)?,
        }
        root.draw(&Text::new(
            text.clone(),
            (x + 22, y),
            font.clone().pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_legends_wrap_inside_the_chart() {
        let items: Vec<(Swatch, String)> = (0..9)
            .map(|i| {
                (
                    Swatch::Line(FAIL),
                    format!("series number {i} with a long name"),
                )
            })
            .collect();
        let at = layout(1200, &items);
        assert!(at.iter().all(|&(x, _)| x >= LEFT));
        for ((_, t), (x, _)) in items.iter().zip(&at) {
            assert!(x + entry_width(t) <= 1200 - 12, "{t} at {x}");
        }
        assert!(at.last().unwrap().1 >= 2);
        assert_eq!(
            height(1200, &items),
            (at.last().unwrap().1 as u32 + 1) * 20 + 8
        );
    }
}

//! PNG export of the dashboard's charts: the same SVG a page shows, rasterised with
//! resvg (usvg + tiny-skia). Text uses the system's fonts, loaded once; the generic
//! `sans-serif` family is mapped to the first of DejaVu Sans, Liberation Sans, Noto Sans
//! or Arial that is installed (Debian: `fonts-dejavu-core`). Without any font the chart
//! still renders, without its text, and the response says so in `x-memwatch-warning`.

use std::sync::{Arc, OnceLock};

use resvg::usvg::{self, fontdb};

/// Fonts the `sans-serif` family may map to, in order of preference.
const SANS: [&str; 4] = ["DejaVu Sans", "Liberation Sans", "Noto Sans", "Arial"];

fn fonts() -> &'static Arc<fontdb::Database> {
    static DB: OnceLock<Arc<fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = fontdb::Database::new();
        db.load_system_fonts();
        let have = |name: &str| {
            db.faces()
                .any(|f| f.families.iter().any(|(fam, _)| fam == name))
        };
        if let Some(name) = SANS.iter().find(|n| have(n)) {
            let name = name.to_string();
            db.set_sans_serif_family(name);
        }
        Arc::new(db)
    })
}

/// Whether any font is available to draw chart text with.
pub fn have_fonts() -> bool {
    !fonts().is_empty()
}

/// Rasterises `svg` at `scale` (2.0 gives a sharp image on high-density screens).
pub fn from_svg(svg: &str, scale: f32) -> Result<Vec<u8>, String> {
    let opt = usvg::Options {
        fontdb: fonts().clone(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| format!("chart SVG unreadable: {e}"))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(scale)
        .ok_or("chart too large")?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("cannot allocate a {}x{} image", size.width(), size.height()))?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("PNG encoding failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rasterises_a_chart() {
        let svg = r##"<svg width="120" height="40" xmlns="http://www.w3.org/2000/svg"><rect x="0" y="0" width="60" height="40" fill="#005EB8"/><text x="70" y="20" font-family="sans-serif" font-size="12">peak</text></svg>"##;
        let png = from_svg(svg, 2.0).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR width/height: 240 x 80 at scale 2.
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 240);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 80);
        assert!(from_svg("<not svg", 1.0).is_err());
    }
}

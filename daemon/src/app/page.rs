//! Answering a dashboard page: rendering its askama template (templates in
//! `web/templates/`), a chart as a PNG download, and the `format` query every page with
//! data takes (`format=json` for the data, `format=png` for one of its charts).

use axum::http::header;
use axum::response::{Html, IntoResponse, Response};

use super::error::AppError;
use crate::render::png;

/// A chart's SVG as a PNG download named `file`.png.
pub(crate) fn png_response(svg: &str, file: &str) -> Result<Response, AppError> {
    let png = png::from_svg(svg, 2.0).map_err(AppError::internal)?;
    let mut r = (
        [
            (header::CONTENT_TYPE, "image/png".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}.png\""),
            ),
        ],
        png,
    )
        .into_response();
    if !png::have_fonts() {
        r.headers_mut().insert(
            header::HeaderName::from_static("x-memwatch-warning"),
            header::HeaderValue::from_static(
                "no system font found: chart text is missing (install fonts-dejavu-core)",
            ),
        );
    }
    Ok(r)
}

/// Renders a template into an HTML response.
pub(crate) fn html<T: askama::Template>(t: &T) -> Result<Response, AppError> {
    t.render()
        .map(|s| Html(s).into_response())
        .map_err(|e| AppError::internal(format!("template failed: {e}")))
}

/// Whether a page's `format` asks for JSON (`json`); `html`, `png` or none ask for the
/// page. Anything else is refused.
pub(crate) fn wants_json(format: Option<&str>) -> Result<bool, AppError> {
    match format {
        None | Some("html") | Some("png") => Ok(false),
        Some("json") => Ok(true),
        Some(f) => Err(AppError::bad(format!(
            "unknown format {f:?} (use format=json, format=png or leave it out)"
        ))),
    }
}

/// Whether a page's `format` asks for one of its charts as a PNG.
pub(crate) fn wants_png(format: Option<&str>) -> bool {
    format == Some("png")
}

/// The PNG of one of a page's charts: `charts` are (key, svg), `chart` the key asked for
/// (the first chart when none); `file` names the download.
pub(crate) fn png_of(
    chart: Option<&str>,
    charts: &[(String, &str)],
    file: &str,
) -> Result<Response, AppError> {
    let pick = match chart {
        Some(k) => charts.iter().find(|(key, _)| key == k),
        None => charts.iter().find(|(_, svg)| !svg.is_empty()),
    };
    match pick {
        Some((key, svg)) if !svg.is_empty() => png_response(svg, &format!("{file}-{key}")),
        _ => Err(AppError::not_found(format!(
            "this page has no chart {:?} (charts: {})",
            chart.unwrap_or("(first)"),
            charts
                .iter()
                .filter(|(_, s)| !s.is_empty())
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

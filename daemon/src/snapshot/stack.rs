//! A stack as pages show it: titled by the user's frame (the site, by the one rule of
//! `memwatch_analysis::torch::stacks::site_of_frames`: the innermost Python frame of the
//! program's own code, not PyTorch's, not the standard library's, not C++), with every
//! frame below it for a `<details>`.

use memwatch_analysis::torch::stacks::{site_of_frames, UNKNOWN_SITE};
use memwatch_analysis::torch::Frame;

/// The site label of a stack's frames (innermost first), as the framework view and
/// `memwatch report` name it.
pub(crate) fn site_label(frames: &[Frame]) -> String {
    site_of_frames(frames).map_or_else(|| UNKNOWN_SITE.to_string(), Frame::site_label)
}

/// One stack, ready for a template.
#[derive(Debug, Clone, Default)]
pub(crate) struct StackView {
    /// The user's frame (or what stands for it), e.g. `train.py:42 in step`.
    pub title: String,
    /// Every frame, innermost first: (text, whether it is the title's frame).
    pub frames: Vec<(String, bool)>,
    /// Shown open (every frame listed without a click).
    pub open: bool,
}

impl StackView {
    /// The view of `frames` (empty: no stack recorded).
    pub fn of(frames: &[Frame]) -> StackView {
        let site = site_of_frames(frames);
        StackView {
            title: site.map_or_else(|| UNKNOWN_SITE.to_string(), Frame::site_label),
            frames: frames
                .iter()
                .map(|f| {
                    let text = if f.is_python() {
                        format!("{}:{} in {}", f.filename, f.line, f.name)
                    } else if f.filename.is_empty() || f.filename == "??" {
                        f.name.clone()
                    } else {
                        format!("{} ({})", f.name, f.filename)
                    };
                    (text, site.is_some_and(|s| std::ptr::eq(s, f)))
                })
                .collect(),
            open: false,
        }
    }

    /// A title with no frames to show (a stack not recorded).
    pub fn untitled(title: &str) -> StackView {
        StackView {
            title: title.to_string(),
            ..StackView::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_is_the_users_frame_and_every_frame_follows() {
        let f = |name: &str, file: &str, line| Frame {
            name: name.into(),
            filename: file.into(),
            line,
        };
        let frames = vec![
            f("c10::cuda::CUDACachingAllocator::malloc()", "??", 0),
            f("at::empty()", "", 0),
            f(
                "forward",
                "/v/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                125,
            ),
            f("step", "/src/train.py", 42),
            f("<module>", "/src/train.py", 80),
        ];
        let v = StackView::of(&frames);
        assert_eq!(v.title, "train.py:42 in step");
        assert_eq!(v.frames.len(), 5);
        assert_eq!(v.frames[3], ("/src/train.py:42 in step".into(), true));
        assert_eq!(v.frames.iter().filter(|x| x.1).count(), 1);
        assert_eq!(v.frames[0].0, "c10::cuda::CUDACachingAllocator::malloc()");
        assert_eq!(StackView::of(&[]).title, UNKNOWN_SITE);
    }
}

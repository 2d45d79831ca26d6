//! Capture analysis on synthetic captures whose expected numbers are worked out by hand
//! (see the timeline comments), plus damaged and foreign files. One test binary; the
//! captures are built in `fixtures`, each other module one theme.

mod damage;
mod fixtures;
mod images;
mod scenario;

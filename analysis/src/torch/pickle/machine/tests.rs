use super::*;
use crate::torch::pickle::router::Element;
use crate::torch::pickle::write::Writer;

fn load_bytes(b: &[u8]) -> Result<Value, PickleError> {
    load_plain(b)
}

fn err_kind(b: &[u8]) -> ErrorKind {
    load_bytes(b).unwrap_err().kind
}

#[test]
fn protocol_0_text_opcodes() {
    // pickle.dumps({'a': [1, 2.5, 'x', None, True]}, protocol=0)
    let p = b"(dp0\nVa\np1\n(lp2\nI1\naF2.5\naVx\np3\naNaI01\nas.";
    let v = load_bytes(p).unwrap();
    let list = v.get("a").unwrap().as_seq().unwrap();
    assert_eq!(list[0], Value::Int(1));
    assert_eq!(list[1], Value::Float(2.5));
    assert_eq!(list[2].as_str(), Some("x"));
    assert_eq!(list[3], Value::None);
    assert_eq!(list[4], Value::Bool(true));
}

#[test]
fn shared_objects_stay_shared() {
    // x = {'k': 1}; pickle.dumps([x, x], protocol=4)
    let p = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01k\x94K\x01sh\x01e.";
    let v = load_bytes(p).unwrap();
    let l = v.as_seq().unwrap();
    let (Value::Dict(a), Value::Dict(b)) = (&l[0], &l[1]) else {
        panic!("{v:?}")
    };
    assert!(Rc::ptr_eq(a, b));
}

#[test]
fn a_finished_sibling_can_be_fetched_while_still_on_the_stack() {
    // x = {}; pickle.dumps([x, [x]], 4)
    let p = b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94]\x94h\x01ae.";
    let v = load_bytes(p).unwrap();
    let l = v.as_seq().unwrap();
    let (Value::Dict(a), Value::List(inner)) = (&l[0], &l[1]) else {
        panic!("{v:?}")
    };
    let Value::Dict(b) = &inner[0] else { panic!() };
    assert!(Rc::ptr_eq(a, b));
}

#[test]
fn code_is_refused_with_its_offset() {
    // pickle.dumps of a class whose __reduce__ returns (os.system, ('echo hi',)),
    // protocol 0 and protocol 4.
    let p0 = b"cposix\nsystem\np0\n(Vecho hi\np1\ntp2\nRp3\n.";
    let e = load_bytes(p0).unwrap_err();
    assert_eq!(e.offset, 0);
    assert!(
        e.to_string().contains("GLOBAL (imports posix.system)"),
        "{e}"
    );
    let p4 = b"\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x07echo hi\x94\x85\x94R\x94.";
    let e = load_bytes(p4).unwrap_err();
    assert_eq!(e.offset, 28);
    assert!(
        e.to_string()
            .contains("STACK_GLOBAL (imports posix.system)"),
        "{e}"
    );
    for op in [b'R', b'b', b'o', 0x81, 0x92, 0x82, b'Q', 0x97] {
        assert!(
            matches!(err_kind(&[b'N', op]), ErrorKind::Refused { .. }),
            "{op}"
        );
    }
}

#[test]
fn hostile_shapes_are_errors() {
    assert_eq!(err_kind(b"\x80\x04"), ErrorKind::Truncated);
    assert_eq!(err_kind(b"]"), ErrorKind::Truncated);
    // BINUNICODE8 declaring 2^60 bytes.
    let mut huge = b"\x80\x04\x8d".to_vec();
    huge.extend_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(err_kind(&huge), ErrorKind::TooLong { .. }));
    // BINUNICODE declaring more than the file holds.
    assert_eq!(err_kind(b"X\xff\xff\xff\x00abc"), ErrorKind::Truncated);
    let open = vec![b']'; 200_000];
    assert_eq!(err_kind(&open), ErrorKind::TooManyOpen(100_000));
    // [[[...]]] 300 deep, each list finished and fetched back from the memo.
    let mut deep = b"]\x94".to_vec();
    for i in 0..300u32 {
        deep.extend_from_slice(b"0]j");
        deep.extend_from_slice(&i.to_le_bytes());
        deep.extend_from_slice(b"a\x94");
    }
    deep.push(b'.');
    assert_eq!(err_kind(&deep), ErrorKind::TooDeep(200));
    let marks = vec![b'('; 5_000_000];
    assert!(matches!(err_kind(&marks), ErrorKind::StackFull(_)));
    assert_eq!(err_kind(b"h\x05."), ErrorKind::MissingMemo(5));
    assert!(matches!(err_kind(b"Ne."), ErrorKind::NoMark { .. }));
    assert!(matches!(err_kind(b"Na."), ErrorKind::StackUnderflow { .. }));
    assert!(matches!(err_kind(b"NNa."), ErrorKind::WrongTarget { .. }));
    assert_eq!(err_kind(b"\xff"), ErrorKind::UnknownOpcode(0xff));
    assert_eq!(err_kind(b"\x80\x09"), ErrorKind::Protocol(9));
    // l = []; l.append(l)
    assert_eq!(err_kind(b"]\x94h\x00a."), ErrorKind::Recursive);
    assert!(matches!(err_kind(b"(K\x01d."), ErrorKind::OddPairs { .. }));
}

/// Routes: the top dict's `xs` list streams; its elements are dicts.
struct Xs {
    got: Vec<(usize, Value)>,
    lend: bool,
}

impl Router for Xs {
    fn top(&mut self, _: Kind) -> Route {
        Route(1)
    }
    fn child(&mut self, parent: Route, key: Option<&Value>, _: usize, kind: Kind) -> Option<Route> {
        match (parent, key.and_then(Value::as_str), kind) {
            (Route(1), Some("xs"), Kind::List) => Some(Route(2)),
            (Route(2), _, Kind::Dict) => Some(Route::OTHER),
            (Route(2), _, _) => None,
            _ => Some(Route::OTHER),
        }
    }
    fn streaming(&self, r: Route) -> Streaming {
        match (r, self.lend) {
            (Route(2), true) => Streaming::Lend,
            (Route(2), false) => Streaming::Keep,
            _ => Streaming::No,
        }
    }
    fn element(&mut self, _: Route, index: usize, value: Element<'_>) -> Result<(), String> {
        self.got.push((index, value.to_value()));
        Ok(())
    }
}

fn doc(n: usize, batch: usize) -> Vec<u8> {
    // {'a': 1, 'xs': [{'i': i, 'tag': <shared list>} ...], 'z': 'end'} as Python
    // lays it out, with batches of `batch`.
    let mut w = Writer::new(Vec::new(), batch);
    let shared = Value::List(Rc::new(vec![Value::str("s")]));
    let xs: Vec<Value> = (0..n)
        .map(|i| {
            Value::Dict(Rc::new(vec![
                (Value::str("i"), Value::Int(i as i64)),
                (Value::str("tag"), shared.clone()),
            ]))
        })
        .collect();
    let top = Value::Dict(Rc::new(vec![
        (Value::str("a"), Value::Int(1)),
        (Value::str("xs"), Value::List(Rc::new(xs))),
        (Value::str("z"), Value::str("end")),
    ]));
    w.write(&top).unwrap();
    w.finish().unwrap()
}

#[test]
fn streamed_elements_arrive_in_order_and_leave_the_document() {
    for (n, batch) in [(0, 1000), (1, 1000), (2, 3), (2_500, 1000), (30, 7)] {
        for lend in [false, true] {
            let bytes = doc(n, batch);
            let whole = load_plain(&bytes[..]).unwrap();
            let mut r = Xs {
                got: Vec::new(),
                lend,
            };
            let top = load(&bytes[..], &mut r, &Limits::default()).unwrap();
            assert_eq!(r.got.len(), n, "n={n} batch={batch}");
            let expected = whole.get("xs").unwrap().as_seq().unwrap();
            for (i, (idx, v)) in r.got.iter().enumerate() {
                assert_eq!(*idx, i);
                // The shared list is referred back to from far away: still the same
                // object, whether the elements are kept or lent.
                assert_eq!(v, &expected[i]);
                let (Some(Value::List(a)), Some(Value::List(b))) =
                    (v.get("tag"), r.got[0].1.get("tag"))
                else {
                    panic!("{v:?}")
                };
                assert!(Rc::ptr_eq(a, b));
            }
            assert_eq!(top.get("xs").unwrap().as_seq().unwrap().len(), 0);
            assert_eq!(top.get("z").unwrap().as_str(), Some("end"));
        }
    }
}

#[test]
fn repeated_lists_of_back_references_are_shared_only_while_the_memo_agrees() {
    // {'xs': [e0, e1, e2, e3, e4]}, xs streamed: e0 = {'f': [F1, F2]} (frame dicts
    // made there), e1 and e2 = {'f': [GET F1, GET F2]} (a new list each, as Python
    // writes them), e3 = {'g': F1', 'f': [GET 6, GET 8]} where F1' = {'n': 9} is put
    // at F1's memo index, e4 = {'f': [GET 6, GET 8]}.
    let bytes: &[u8] = b"\x80\x04}q\x00(\x8c\x02xsq\x01]q\x02(\
        }q\x03(\x8c\x01fq\x04]\x94(}q\x06(\x8c\x01nq\x07K\x01u}q\x08(h\x07K\x02ueu\
        }q\x09(h\x04]\x94(h\x06h\x08eu\
        }q\x0b(h\x04]\x94(h\x06h\x08eu\
        }q\x0d(\x8c\x01gq\x0e}q\x06(h\x07K\x09uh\x04]\x94(h\x06h\x08eu\
        }q\x10(h\x04]\x94(h\x06h\x08eu\
        eu.";
    let whole = load_plain(bytes).unwrap();
    let expected = whole.get("xs").unwrap().as_seq().unwrap();
    let n = |v: &Value, i: usize| v.get("f").unwrap().as_seq().unwrap()[i].get("n").cloned();
    assert_eq!(n(&expected[3], 0), Some(Value::Int(9)));
    assert_eq!(n(&expected[4], 1), Some(Value::Int(2)));
    for lend in [false, true] {
        let mut r = Xs {
            got: Vec::new(),
            lend,
        };
        load(bytes, &mut r, &Limits::default()).unwrap();
        let got: Vec<Value> = r.got.into_iter().map(|(_, v)| v).collect();
        assert_eq!(got, expected);
        let list = |i: usize| match got[i].get("f") {
            Some(Value::List(l)) => l.clone(),
            other => panic!("{other:?}"),
        };
        // Read whole only inside forgotten elements: e2 repeats e1's list there.
        assert_eq!(Rc::ptr_eq(&list(1), &list(2)), lend);
        assert!(!Rc::ptr_eq(&list(1), &list(4)));
        assert!(!Rc::ptr_eq(&list(3), &list(4)));
    }
}

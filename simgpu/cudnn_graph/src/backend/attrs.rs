//! The backend API's numbering (descriptor types, attribute types and names, as cuDNN 9's
//! headers number them; cross-checked against bindings generated from those headers in the
//! tests) and the rules for setting an attribute: which type and how many values each
//! attribute of each descriptor accepts. A wrong type or count is CUDNN_STATUS_BAD_PARAM, as in
//! the real library.

use simgpu_cudnn_core::*;

// cudnnBackendDescriptorType_t
pub const POINTWISE_DESCRIPTOR: c_int = 0;
pub const CONVOLUTION_DESCRIPTOR: c_int = 1;
pub const ENGINE_DESCRIPTOR: c_int = 2;
pub const ENGINECFG_DESCRIPTOR: c_int = 3;
pub const ENGINEHEUR_DESCRIPTOR: c_int = 4;
pub const EXECUTION_PLAN_DESCRIPTOR: c_int = 5;
pub const KNOB_CHOICE_DESCRIPTOR: c_int = 7;
pub const KNOB_INFO_DESCRIPTOR: c_int = 8;
pub const OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: c_int = 10;
pub const OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: c_int = 11;
pub const OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: c_int = 12;
pub const OPERATION_POINTWISE_DESCRIPTOR: c_int = 13;
pub const OPERATIONGRAPH_DESCRIPTOR: c_int = 15;
pub const VARIANT_PACK_DESCRIPTOR: c_int = 16;
pub const TENSOR_DESCRIPTOR: c_int = 17;
/// The last descriptor type cuDNN 9 numbers (OPERATION_SOFTMAX).
pub const LAST_DESCRIPTOR_TYPE: c_int = 45;

// cudnnBackendAttributeType_t
pub const TYPE_HANDLE: c_int = 0;
pub const TYPE_DATA_TYPE: c_int = 1;
pub const TYPE_BOOLEAN: c_int = 2;
pub const TYPE_INT64: c_int = 3;
pub const TYPE_FLOAT: c_int = 4;
pub const TYPE_DOUBLE: c_int = 5;
pub const TYPE_VOID_PTR: c_int = 6;
pub const TYPE_CONVOLUTION_MODE: c_int = 7;
pub const TYPE_HEUR_MODE: c_int = 8;
pub const TYPE_KNOB_TYPE: c_int = 9;
pub const TYPE_NAN_PROPOGATION: c_int = 10;
pub const TYPE_NUMERICAL_NOTE: c_int = 11;
pub const TYPE_POINTWISE_MODE: c_int = 14;
pub const TYPE_BACKEND_DESCRIPTOR: c_int = 15;
pub const TYPE_BEHAVIOR_NOTE: c_int = 19;
pub const TYPE_TENSOR_REORDERING_MODE: c_int = 20;
pub const TYPE_INT32: c_int = 23;
pub const TYPE_CHAR: c_int = 24;
pub const TYPE_FRACTION: c_int = 26;
pub const LAST_ATTRIBUTE_TYPE: c_int = 30;

// cudnnBackendAttributeName_t
pub const ATTR_POINTWISE_MODE: c_int = 0;
pub const ATTR_POINTWISE_RELU_LOWER_CLIP: c_int = 3;
pub const ATTR_CONVOLUTION_COMP_TYPE: c_int = 100;
pub const ATTR_CONVOLUTION_CONV_MODE: c_int = 101;
pub const ATTR_CONVOLUTION_DILATIONS: c_int = 102;
pub const ATTR_CONVOLUTION_FILTER_STRIDES: c_int = 103;
pub const ATTR_CONVOLUTION_POST_PADDINGS: c_int = 104;
pub const ATTR_CONVOLUTION_PRE_PADDINGS: c_int = 105;
pub const ATTR_CONVOLUTION_SPATIAL_DIMS: c_int = 106;
pub const ATTR_ENGINEHEUR_MODE: c_int = 200;
pub const ATTR_ENGINEHEUR_OPERATION_GRAPH: c_int = 201;
pub const ATTR_ENGINEHEUR_RESULTS: c_int = 202;
pub const ATTR_ENGINEHEUR_SM_COUNT_TARGET: c_int = 203;
pub const ATTR_ENGINECFG_ENGINE: c_int = 300;
pub const ATTR_ENGINECFG_INTERMEDIATE_INFO: c_int = 301;
pub const ATTR_ENGINECFG_KNOB_CHOICES: c_int = 302;
pub const ATTR_ENGINECFG_WORKSPACE_SIZE: c_int = 303;
pub const ATTR_EXECUTION_PLAN_HANDLE: c_int = 400;
pub const ATTR_EXECUTION_PLAN_ENGINE_CONFIG: c_int = 401;
pub const ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: c_int = 402;
pub const ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS: c_int = 403;
pub const ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS: c_int = 404;
pub const ATTR_EXECUTION_PLAN_JSON_REPRESENTATION: c_int = 405;
pub const ATTR_KNOB_CHOICE_KNOB_TYPE: c_int = 600;
pub const ATTR_KNOB_CHOICE_KNOB_VALUE: c_int = 601;
/// First attribute of each convolution operation: ALPHA, BETA, CONV_DESC, then the tensors in
/// the order the header lists them (forward: W, X, Y; data: W, DX, DY; filter: DW, X, DY).
pub const ATTR_OP_CONV_FWD: c_int = 700;
pub const ATTR_OP_CONV_BWD_DATA: c_int = 706;
pub const ATTR_OP_CONV_BWD_FILTER: c_int = 712;
pub const ATTR_OP_POINTWISE_PW_DESCRIPTOR: c_int = 750;
pub const ATTR_OP_POINTWISE_XDESC: c_int = 751;
pub const ATTR_OP_POINTWISE_BDESC: c_int = 752;
pub const ATTR_OP_POINTWISE_YDESC: c_int = 753;
pub const ATTR_OP_POINTWISE_ALPHA1: c_int = 754;
pub const ATTR_OP_POINTWISE_ALPHA2: c_int = 755;
pub const ATTR_OPERATIONGRAPH_HANDLE: c_int = 800;
pub const ATTR_OPERATIONGRAPH_OPS: c_int = 801;
pub const ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: c_int = 802;
pub const ATTR_TENSOR_BYTE_ALIGNMENT: c_int = 900;
pub const ATTR_TENSOR_DATA_TYPE: c_int = 901;
pub const ATTR_TENSOR_DIMENSIONS: c_int = 902;
pub const ATTR_TENSOR_STRIDES: c_int = 903;
pub const ATTR_TENSOR_UNIQUE_ID: c_int = 906;
pub const ATTR_TENSOR_IS_VIRTUAL: c_int = 907;
pub const ATTR_VARIANT_PACK_UNIQUE_IDS: c_int = 1000;
pub const ATTR_VARIANT_PACK_DATA_POINTERS: c_int = 1001;
pub const ATTR_VARIANT_PACK_INTERMEDIATES: c_int = 1002;
pub const ATTR_VARIANT_PACK_WORKSPACE: c_int = 1003;
pub const ATTR_KNOB_INFO_TYPE: c_int = 1200;
pub const ATTR_KNOB_INFO_MAXIMUM_VALUE: c_int = 1201;
pub const ATTR_KNOB_INFO_MINIMUM_VALUE: c_int = 1202;
pub const ATTR_KNOB_INFO_STRIDE: c_int = 1203;
pub const ATTR_ENGINE_OPERATION_GRAPH: c_int = 1300;
pub const ATTR_ENGINE_GLOBAL_INDEX: c_int = 1301;
pub const ATTR_ENGINE_KNOB_INFO: c_int = 1302;
pub const ATTR_ENGINE_NUMERICAL_NOTE: c_int = 1303;
pub const ATTR_ENGINE_LAYOUT_INFO: c_int = 1304;
pub const ATTR_ENGINE_BEHAVIOR_NOTE: c_int = 1305;
pub const ATTR_ENGINE_SM_COUNT_TARGET: c_int = 1306;

// cudnnBackendHeurMode_t
pub const HEUR_MODE_FALLBACK: i64 = 2;
pub const HEUR_MODES: i64 = 4;
// cudnnBackendNumericalNote_t
pub const NOTE_FFT: i64 = 3;
pub const NOTE_NONDETERMINISTIC: i64 = 4;
pub const NOTE_WINOGRAD: i64 = 5;
// cudnnBackendKnobType_t
pub const KNOB_TILE_SIZE: i64 = 2;

/// Bytes of one element of an attribute type.
pub fn elem_bytes(ty: c_int) -> usize {
    match ty {
        TYPE_HANDLE | TYPE_INT64 | TYPE_DOUBLE | TYPE_VOID_PTR | TYPE_BACKEND_DESCRIPTOR => 8,
        TYPE_BOOLEAN | TYPE_CHAR => 1,
        TYPE_FRACTION => 16,
        _ => 4,
    }
}

/// How many values an attribute takes.
#[derive(Clone, Copy)]
enum Count {
    One,
    /// 1 to 8 (tensor dimensions and strides).
    Dims,
    /// 1 to 3 (convolution spatial dimensions).
    Spatial,
    Any,
}

/// The type(s) and count attribute `name` of a descriptor of type `desc` accepts; None: the
/// descriptor has no such settable attribute.
fn rule(desc: c_int, name: c_int) -> Option<(&'static [c_int], Count)> {
    use Count::*;
    const D: &[c_int] = &[TYPE_BACKEND_DESCRIPTOR];
    const I: &[c_int] = &[TYPE_INT64];
    const SCALE: &[c_int] = &[TYPE_FLOAT, TYPE_DOUBLE];
    Some(match (desc, name) {
        (TENSOR_DESCRIPTOR, 900 | 904 | 905 | 906) => (I, One),
        (TENSOR_DESCRIPTOR, 901) => (&[TYPE_DATA_TYPE], One),
        (TENSOR_DESCRIPTOR, 902 | 903) => (I, Dims),
        (TENSOR_DESCRIPTOR, ATTR_TENSOR_IS_VIRTUAL | 908) => (&[TYPE_BOOLEAN], One),
        (TENSOR_DESCRIPTOR, 909) => (&[TYPE_TENSOR_REORDERING_MODE], One),
        (TENSOR_DESCRIPTOR, 913) => (D, One),
        (CONVOLUTION_DESCRIPTOR, 100) => (&[TYPE_DATA_TYPE], One),
        (CONVOLUTION_DESCRIPTOR, 101) => (&[TYPE_CONVOLUTION_MODE], One),
        (CONVOLUTION_DESCRIPTOR, 102..=105) => (I, Spatial),
        (CONVOLUTION_DESCRIPTOR, 106) => (I, One),
        (OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, 700 | 701)
        | (OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, 706 | 707)
        | (OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, 712 | 713) => (SCALE, One),
        (OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, 702..=705)
        | (OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, 708..=711)
        | (OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, 714..=717) => (D, One),
        (POINTWISE_DESCRIPTOR, 0) => (&[TYPE_POINTWISE_MODE], One),
        (POINTWISE_DESCRIPTOR, 1) => (&[TYPE_DATA_TYPE], One),
        (POINTWISE_DESCRIPTOR, 2) => (&[TYPE_NAN_PROPOGATION], One),
        (POINTWISE_DESCRIPTOR, 3..=8) => (SCALE, One),
        (POINTWISE_DESCRIPTOR, 9) => (I, One),
        (OPERATION_POINTWISE_DESCRIPTOR, 750..=753 | 756..=758) => (D, One),
        (OPERATION_POINTWISE_DESCRIPTOR, 754 | 755) => (SCALE, One),
        (OPERATIONGRAPH_DESCRIPTOR, 800) => (&[TYPE_HANDLE], One),
        (OPERATIONGRAPH_DESCRIPTOR, 801) => (D, Any),
        (ENGINEHEUR_DESCRIPTOR, 200) => (&[TYPE_HEUR_MODE], One),
        (ENGINEHEUR_DESCRIPTOR, 201 | 204) => (D, One),
        (ENGINEHEUR_DESCRIPTOR, ATTR_ENGINEHEUR_SM_COUNT_TARGET) => (&[TYPE_INT32], One),
        (ENGINE_DESCRIPTOR, 1300) => (D, One),
        (ENGINE_DESCRIPTOR, 1301) => (I, One),
        (ENGINE_DESCRIPTOR, ATTR_ENGINE_SM_COUNT_TARGET) => (&[TYPE_INT32], One),
        (ENGINECFG_DESCRIPTOR, ATTR_ENGINECFG_ENGINE | ATTR_ENGINECFG_INTERMEDIATE_INFO) => {
            (D, One)
        }
        (ENGINECFG_DESCRIPTOR, 302) => (D, Any),
        (KNOB_CHOICE_DESCRIPTOR, 600) => (&[TYPE_KNOB_TYPE], One),
        (KNOB_CHOICE_DESCRIPTOR, 601) => (I, One),
        (EXECUTION_PLAN_DESCRIPTOR, 400) => (&[TYPE_HANDLE], One),
        (EXECUTION_PLAN_DESCRIPTOR, 401 | 406 | 407) => (D, One),
        (EXECUTION_PLAN_DESCRIPTOR, ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS) => (I, Any),
        (EXECUTION_PLAN_DESCRIPTOR, 405) => (&[TYPE_CHAR], Any),
        (VARIANT_PACK_DESCRIPTOR, 1000) => (I, Any),
        (
            VARIANT_PACK_DESCRIPTOR,
            ATTR_VARIANT_PACK_DATA_POINTERS | ATTR_VARIANT_PACK_INTERMEDIATES,
        ) => (&[TYPE_VOID_PTR], Any),
        (VARIANT_PACK_DESCRIPTOR, 1003) => (&[TYPE_VOID_PTR], One),
        _ => return None,
    })
}

/// Whether descriptors of this type are simulated (others accept any attribute and refuse to
/// finalize with CUDNN_STATUS_NOT_SUPPORTED).
pub fn simulated(desc: c_int) -> bool {
    matches!(
        desc,
        TENSOR_DESCRIPTOR
            | CONVOLUTION_DESCRIPTOR
            | OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
            | OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
            | OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
            | POINTWISE_DESCRIPTOR
            | OPERATION_POINTWISE_DESCRIPTOR
            | OPERATIONGRAPH_DESCRIPTOR
            | ENGINEHEUR_DESCRIPTOR
            | ENGINE_DESCRIPTOR
            | ENGINECFG_DESCRIPTOR
            | KNOB_CHOICE_DESCRIPTOR
            | KNOB_INFO_DESCRIPTOR
            | EXECUTION_PLAN_DESCRIPTOR
            | VARIANT_PACK_DESCRIPTOR
    )
}

/// Checks a cudnnBackendSetAttribute call against the attribute's rule.
pub fn check_set(desc: c_int, name: c_int, ty: c_int, count: i64) -> Result<(), Status> {
    if !simulated(desc) {
        return Ok(());
    }
    let (types, n) = rule(desc, name).ok_or(BAD_PARAM)?;
    let ok_count = match n {
        Count::One => count == 1,
        Count::Dims => (1..=8).contains(&count),
        Count::Spatial => (1..=3).contains(&count),
        Count::Any => count >= 0,
    };
    if types.contains(&ty) && ok_count {
        Ok(())
    } else {
        Err(BAD_PARAM)
    }
}

#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::cudnn::sys as dnn;

    #[test]
    fn backend_numbering_matches_the_headers() {
        use dnn::cudnnBackendAttributeName_t as A;
        use dnn::cudnnBackendAttributeType_t as T;
        use dnn::cudnnBackendDescriptorType_t as D;
        let pairs: &[(c_int, c_int)] = &[
            (
                POINTWISE_DESCRIPTOR,
                D::CUDNN_BACKEND_POINTWISE_DESCRIPTOR as c_int,
            ),
            (
                CONVOLUTION_DESCRIPTOR,
                D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR as c_int,
            ),
            (
                ENGINE_DESCRIPTOR,
                D::CUDNN_BACKEND_ENGINE_DESCRIPTOR as c_int,
            ),
            (
                ENGINECFG_DESCRIPTOR,
                D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR as c_int,
            ),
            (
                ENGINEHEUR_DESCRIPTOR,
                D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR as c_int,
            ),
            (
                EXECUTION_PLAN_DESCRIPTOR,
                D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR as c_int,
            ),
            (
                KNOB_CHOICE_DESCRIPTOR,
                D::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR as c_int,
            ),
            (
                KNOB_INFO_DESCRIPTOR,
                D::CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_POINTWISE_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR as c_int,
            ),
            (
                OPERATIONGRAPH_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR as c_int,
            ),
            (
                VARIANT_PACK_DESCRIPTOR,
                D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR as c_int,
            ),
            (
                TENSOR_DESCRIPTOR,
                D::CUDNN_BACKEND_TENSOR_DESCRIPTOR as c_int,
            ),
            (
                LAST_DESCRIPTOR_TYPE,
                D::CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR as c_int,
            ),
            (TYPE_HANDLE, T::CUDNN_TYPE_HANDLE as c_int),
            (TYPE_DATA_TYPE, T::CUDNN_TYPE_DATA_TYPE as c_int),
            (TYPE_BOOLEAN, T::CUDNN_TYPE_BOOLEAN as c_int),
            (TYPE_INT64, T::CUDNN_TYPE_INT64 as c_int),
            (TYPE_FLOAT, T::CUDNN_TYPE_FLOAT as c_int),
            (TYPE_DOUBLE, T::CUDNN_TYPE_DOUBLE as c_int),
            (TYPE_VOID_PTR, T::CUDNN_TYPE_VOID_PTR as c_int),
            (
                TYPE_CONVOLUTION_MODE,
                T::CUDNN_TYPE_CONVOLUTION_MODE as c_int,
            ),
            (TYPE_HEUR_MODE, T::CUDNN_TYPE_HEUR_MODE as c_int),
            (TYPE_KNOB_TYPE, T::CUDNN_TYPE_KNOB_TYPE as c_int),
            (TYPE_NAN_PROPOGATION, T::CUDNN_TYPE_NAN_PROPOGATION as c_int),
            (TYPE_NUMERICAL_NOTE, T::CUDNN_TYPE_NUMERICAL_NOTE as c_int),
            (TYPE_POINTWISE_MODE, T::CUDNN_TYPE_POINTWISE_MODE as c_int),
            (
                TYPE_BACKEND_DESCRIPTOR,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR as c_int,
            ),
            (TYPE_BEHAVIOR_NOTE, T::CUDNN_TYPE_BEHAVIOR_NOTE as c_int),
            (
                TYPE_TENSOR_REORDERING_MODE,
                T::CUDNN_TYPE_TENSOR_REORDERING_MODE as c_int,
            ),
            (TYPE_INT32, T::CUDNN_TYPE_INT32 as c_int),
            (TYPE_CHAR, T::CUDNN_TYPE_CHAR as c_int),
            (TYPE_FRACTION, T::CUDNN_TYPE_FRACTION as c_int),
            (
                LAST_ATTRIBUTE_TYPE,
                T::CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE as c_int,
            ),
            (
                ATTR_CONVOLUTION_COMP_TYPE,
                A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE as c_int,
            ),
            (
                ATTR_CONVOLUTION_SPATIAL_DIMS,
                A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS as c_int,
            ),
            (ATTR_ENGINEHEUR_MODE, A::CUDNN_ATTR_ENGINEHEUR_MODE as c_int),
            (
                ATTR_ENGINEHEUR_RESULTS,
                A::CUDNN_ATTR_ENGINEHEUR_RESULTS as c_int,
            ),
            (
                ATTR_ENGINECFG_KNOB_CHOICES,
                A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES as c_int,
            ),
            (
                ATTR_ENGINECFG_WORKSPACE_SIZE,
                A::CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE as c_int,
            ),
            (
                ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION as c_int,
            ),
            (
                ATTR_KNOB_CHOICE_KNOB_VALUE,
                A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE as c_int,
            ),
            (
                ATTR_OP_CONV_FWD,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA as c_int,
            ),
            (
                ATTR_OP_CONV_FWD + 3,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W as c_int,
            ),
            (
                ATTR_OP_CONV_FWD + 5,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_DATA + 4,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_FILTER + 3,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_FILTER + 5,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY as c_int,
            ),
            (
                ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                A::CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT as c_int,
            ),
            (
                ATTR_TENSOR_BYTE_ALIGNMENT,
                A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT as c_int,
            ),
            (
                ATTR_TENSOR_UNIQUE_ID,
                A::CUDNN_ATTR_TENSOR_UNIQUE_ID as c_int,
            ),
            (
                ATTR_TENSOR_IS_VIRTUAL,
                A::CUDNN_ATTR_TENSOR_IS_VIRTUAL as c_int,
            ),
            (
                ATTR_VARIANT_PACK_WORKSPACE,
                A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE as c_int,
            ),
            (
                ATTR_KNOB_INFO_STRIDE,
                A::CUDNN_ATTR_KNOB_INFO_STRIDE as c_int,
            ),
            (
                ATTR_ENGINE_GLOBAL_INDEX,
                A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX as c_int,
            ),
            (
                ATTR_ENGINE_KNOB_INFO,
                A::CUDNN_ATTR_ENGINE_KNOB_INFO as c_int,
            ),
            (
                ATTR_ENGINE_NUMERICAL_NOTE,
                A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE as c_int,
            ),
            (
                ATTR_ENGINE_LAYOUT_INFO,
                A::CUDNN_ATTR_ENGINE_LAYOUT_INFO as c_int,
            ),
            (
                ATTR_ENGINE_BEHAVIOR_NOTE,
                A::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE as c_int,
            ),
            (
                ATTR_ENGINE_SM_COUNT_TARGET,
                A::CUDNN_ATTR_ENGINE_SM_COUNT_TARGET as c_int,
            ),
            (
                HEUR_MODE_FALLBACK as c_int,
                dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK as c_int,
            ),
            (
                HEUR_MODES as c_int,
                dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODES_COUNT as c_int,
            ),
            (
                NOTE_FFT as c_int,
                dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_FFT as c_int,
            ),
            (
                NOTE_NONDETERMINISTIC as c_int,
                dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC as c_int,
            ),
            (
                NOTE_WINOGRAD as c_int,
                dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_WINOGRAD as c_int,
            ),
            (
                KNOB_TILE_SIZE as c_int,
                dnn::cudnnBackendKnobType_t::CUDNN_KNOB_TYPE_TILE_SIZE as c_int,
            ),
            (
                BAD_PARAM_NOT_FINALIZED,
                dnn::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED as c_int,
            ),
            (
                NOT_SUPPORTED_GRAPH_PATTERN,
                dnn::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN as c_int,
            ),
        ];
        for (i, (ours, theirs)) in pairs.iter().enumerate() {
            assert_eq!(ours, theirs, "pair {i}");
        }
    }

    #[test]
    fn wrong_types_and_counts_are_refused() {
        assert_eq!(
            check_set(TENSOR_DESCRIPTOR, ATTR_TENSOR_DIMENSIONS, TYPE_INT64, 4),
            Ok(())
        );
        assert_eq!(
            check_set(TENSOR_DESCRIPTOR, ATTR_TENSOR_DIMENSIONS, TYPE_INT32, 4),
            Err(BAD_PARAM)
        );
        assert_eq!(
            check_set(TENSOR_DESCRIPTOR, ATTR_TENSOR_DIMENSIONS, TYPE_INT64, 9),
            Err(BAD_PARAM)
        );
        assert_eq!(
            check_set(TENSOR_DESCRIPTOR, ATTR_TENSOR_UNIQUE_ID, TYPE_INT64, 2),
            Err(BAD_PARAM)
        );
        assert_eq!(
            check_set(
                CONVOLUTION_DESCRIPTOR,
                ATTR_CONVOLUTION_COMP_TYPE,
                TYPE_INT64,
                1
            ),
            Err(BAD_PARAM)
        );
        assert_eq!(
            check_set(ENGINE_DESCRIPTOR, ATTR_TENSOR_UNIQUE_ID, TYPE_INT64, 1),
            Err(BAD_PARAM)
        );
        assert_eq!(
            check_set(
                ENGINEHEUR_DESCRIPTOR,
                ATTR_ENGINEHEUR_MODE,
                TYPE_HEUR_MODE,
                1
            ),
            Ok(())
        );
        assert_eq!(elem_bytes(TYPE_FRACTION), 16);
    }
}

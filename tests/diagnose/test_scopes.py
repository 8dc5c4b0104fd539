"""An op's Keras layer, read from its name scope as TensorFlow writes it inside a traced step."""

from __future__ import annotations

from keras_xla_guard.diagnose.scopes import op_layers


def test_suffixed_scopes_forward_and_gradient_ops_name_the_layer():
    """Keras <= 3.15 scopes carry `_N` (`dense_1_2` is `dense_1`); a gradient op names the same layer."""
    names = [
        "sequential_1/dense_1_2/MatMul",
        "StatefulPartitionedCall/gradient_tape/sequential_1/dense_1_2/MatMul/MatMul",
        "StatefulPartitionedCall/gradient_tape/sequential_1/dense_2/BiasAdd/BiasAddGrad",
        "StatefulPartitionedCall/adam/truediv_5",
        "StatefulPartitionedCall/compile_loss/mse/Mean",
    ]
    assert op_layers(names, ["sequential", "dense", "dense_1"], optimizer="adam") == (
        "dense_1",
        "dense_1",
        "dense",
        "optimizer adam",
        None,
    )


def test_exact_scopes_win_where_keras_enters_the_layers_own_name():
    """Keras 3.16 scopes are the layer names themselves: `strings_1` is the layer `strings_1`."""
    names = ["functional/strings_1/AsString", "functional/strings/AsString"]
    assert op_layers(names, ["functional", "strings", "strings_1"]) == ("strings_1", "strings")


def test_nested_layers_give_the_deepest_and_an_unknown_scope_none():
    """MobileNetV2's depthwise conv inside its model: the depthwise layer; no optimizer name, no optimizer."""
    names = [
        "gradient_tape/mobilenetv2_1.00_96_1/block_14_depthwise_1/depthwise/DepthwiseConv2dNativeBackpropInput",
        "adam/Sqrt",
    ]
    assert op_layers(names, ["mobilenetv2_1.00_96", "block_14_depthwise", "block_14_project"]) == (
        "block_14_depthwise",
        None,
    )

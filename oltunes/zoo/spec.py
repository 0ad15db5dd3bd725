"""What every shipped variant shares (torch-free, so listing the zoo never imports torch)."""

SIZES = ("s", "m", "l")
PRECISIONS = ("fp32", "fp16", "int8")
INPUT_SHAPE = (1, 8, 8)  # one 8x8 grey image, pixels in [0, 1]
N_CLASSES = 10

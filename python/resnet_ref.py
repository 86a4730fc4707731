"""torchvision's ResNet with Cadre's configurable widths, input channels and stem: the
reference for the parity test (tests/python/resnet_parity.py) and the Python peer of the
images/s benchmark (bench/resnet_throughput.py). Only the constructor is ours; the blocks,
_make_layer and forward are torchvision's: PyPI's torchvision 0.26 in the project venv for the
parity test, Debian's python3-torchvision 0.14 for the benchmark peer."""
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

STAGES = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


class Reference(ResNet):
    """torchvision's ResNet with the stage widths, input channels and stem set from the case.
    Only the constructor differs: its blocks, _make_layer and forward are torchvision's."""

    def __init__(self, depth, width, in_channels, num_classes, stem):
        nn.Module.__init__(self)
        block = Bottleneck if depth >= 50 else BasicBlock
        self._norm_layer = nn.BatchNorm2d
        self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
        small = stem == "small"
        k, s = (3, 1) if small else (7, 2)
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=k, stride=s, padding=k // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if small else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        layers = STAGES[depth]
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)

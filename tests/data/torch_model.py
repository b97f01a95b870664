"""A small PyTorch language model for ``ipusim run/plan --torch`` (tests/test_torch_model_file.py).

``model(micro_batch)`` returns the module and its inputs for one micro-batch: four pre-norm transformer layers
in an ``nn.ModuleList`` between an embedding and a head, and a loss on the labels. ``Net.blocks`` places it with
``poptorch.BeginBlock`` on every layer, ``Net.checkpoint`` puts ``poptorch.recomputationCheckpoint`` on every
layer's output but the last's: what ``--layers-per-ipu`` and ``recompute_checkpoint_every_layer`` stand for.
"""

import torch
import torch.nn.functional as F

VOCAB, WIDTH, HEADS, LAYERS, SEQ = 512, 64, 4, 4, 32


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv, self.out = torch.nn.Linear(WIDTH, 3 * WIDTH), torch.nn.Linear(WIDTH, WIDTH)
        self.up, self.down = torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, WIDTH))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.checkpoint = False
        self.skip = set()  # layers forward does not call

    def forward(self, ids, labels=None):
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            if i in self.skip:
                continue
            x = layer(x)
            if self.checkpoint and i < LAYERS - 1:
                import sim.poptorch as poptorch
                x = poptorch.recomputationCheckpoint(x)
        logits = self.head(self.norm(x))
        if labels is None:
            return logits
        return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))

    def blocks(self, ipus):
        """``poptorch.BeginBlock`` on the embedding, every layer (on ``ipus[i]``) and the head's norm."""
        import sim.poptorch as poptorch
        poptorch.BeginBlock(self.embed, user_id="before_layers", ipu_id=0)
        for i, layer in enumerate(self.layers):
            poptorch.BeginBlock(layer, user_id=f"layer{i}", ipu_id=ipus[i])
        poptorch.BeginBlock(self.norm, user_id="after_layers", ipu_id=ipus[-1])


def model(micro_batch):
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (micro_batch, SEQ))
    return Net(), (ids, ids)


def inference(micro_batch):
    net, (ids, _) = model(micro_batch)
    return net, ids


def three_layers(micro_batch):
    """The last of the four layers not called."""
    net, inputs = model(micro_batch)
    net.skip = {3}
    return net, inputs


def tied(micro_batch):
    """The head's projection tied to the embedding (one weight), as GPT-2's and BERT's."""
    net, inputs = model(micro_batch)
    net.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
    net.head.weight = net.embed.weight
    return net, inputs


class EncoderDecoder(Net):
    """Two stacks: three layers in ``encoder``, then the four of ``layers``."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.ModuleList(Layer() for _ in range(3))

    def forward(self, ids, labels=None):
        x = self.embed(ids)
        for layer in self.encoder:
            x = layer(x)
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.head(self.norm(x)).view(-1, VOCAB), labels.view(-1))


def encoder_decoder(micro_batch):
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (micro_batch, SEQ))
    return EncoderDecoder(), (ids, ids)


def mlp(micro_batch):
    """No list of layers: nothing for the planner to split."""
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()), torch.zeros(micro_batch, 16)


def broken(micro_batch):
    raise ValueError("no such checkpoint")


def not_a_module(micro_batch):
    return torch.zeros(micro_batch)

"""Student code for differential_lambda (correct variants and single-bug variants)."""

LAM_OK = {}
LAM_BAD = {}

LAM_OK["expm1"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = torch.tensordot(q1, k1, dims=1)
    b = torch.tensordot(q2, k2, dims=1)
    # the two -1 terms cancel, expm1 keeps small differences accurate
    return torch.expm1(a) - torch.expm1(b) + lambda_init
'''

LAM_OK["max_shift"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = (q1 * k1).sum()
    b = (q2 * k2).sum()
    m = torch.maximum(a, b).detach()
    return torch.exp(m) * (torch.exp(a - m) - torch.exp(b - m)) + lambda_init
'''

LAM_OK["signed_weights"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    dots = torch.stack([torch.dot(q1, k1), torch.dot(q2, k2)])
    signs = dots.new_tensor([1.0, -1.0])
    return torch.exp(dots) @ signs + lambda_init
'''

LAM_OK["bmm_pairs"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    rows = torch.stack([q1, q2]).unsqueeze(1)      # [2, 1, D]
    cols = torch.stack([k1, k2]).unsqueeze(2)      # [2, D, 1]
    e = torch.bmm(rows, cols).reshape(2).exp()
    return e[0] - e[1] + lambda_init
'''

LAM_OK["function"] = '''

class _Lambda(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        e1 = torch.exp(torch.dot(q1, k1))
        e2 = torch.exp(torch.dot(q2, k2))
        ctx.save_for_backward(q1, k1, q2, k2, e1, e2)
        return e1 - e2 + lambda_init

    @staticmethod
    def backward(ctx, grad):
        q1, k1, q2, k2, e1, e2 = ctx.saved_tensors
        w1 = grad * e1
        w2 = -grad * e2
        need = ctx.needs_input_grad
        return (
            w1 * k1 if need[0] else None,
            w1 * q1 if need[1] else None,
            w2 * k2 if need[2] else None,
            w2 * q2 if need[3] else None,
            None,
        )


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    return _Lambda.apply(q1, k1, q2, k2, lambda_init)
'''

LAM_OK["float64_accumulate"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = torch.dot(q1.double(), k1.double())
    b = torch.dot(q2.double(), k2.double())
    return (torch.exp(a) - torch.exp(b) + lambda_init).to(q1.dtype)
'''

LAM_OK["matmul_operator"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    return (q1 @ k1).exp() - (q2 @ k2).exp() + lambda_init
'''

# ---------------------------------------------------------------- single-bug variants

LAM_BAD["lam_init_folded_into_logaddexp"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = q1 @ k1
    b = q2 @ k2
    # exp(a) + lambda_init == exp(logaddexp(a, log(lambda_init)))
    log_init = a.new_tensor(lambda_init).log()
    return torch.exp(torch.logaddexp(a, log_init)) - torch.exp(b)
'''

LAM_BAD["lam_backward_out_buffer_aliased"] = '''

class _Lambda(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        e1 = torch.exp(torch.dot(q1, k1))
        e2 = torch.exp(torch.dot(q2, k2))
        ctx.save_for_backward(q1, k1, q2, k2, e1, e2)
        return e1 - e2 + lambda_init

    @staticmethod
    def backward(ctx, grad):
        q1, k1, q2, k2, e1, e2 = ctx.saved_tensors
        grads = []
        for q, k, w in ((q1, k1, grad * e1), (q2, k2, -grad * e2)):
            scratch = torch.empty_like(q)
            grads.append(torch.mul(k, w, out=scratch))
            grads.append(torch.mul(q, w, out=scratch))
        return (*grads, None)


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    return _Lambda.apply(q1, k1, q2, k2, lambda_init)
'''

LAM_BAD["lam_sinh_midpoint_overflow"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = torch.inner(q1, k1)
    b = torch.inner(q2, k2)
    # e^a - e^b = 2 e^((a+b)/2) sinh((a-b)/2): one exp and one sinh, no cancellation
    return 2.0 * torch.exp(0.5 * (a + b)) * torch.sinh(0.5 * (a - b)) + lambda_init
'''

LAM_BAD["lam_log_abs_difference_tie_nan_grad"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = torch.dot(q1, k1)
    b = torch.dot(q2, k2)
    # |e^a - e^b| = e^max * (1 - e^-|a-b|), evaluated in log space
    gap = (a - b).abs()
    log_mag = torch.maximum(a, b) + torch.log1p(-torch.exp(-gap))
    return torch.sign(a - b) * torch.exp(log_mag) + lambda_init
'''

LAM_BAD["lam_backward_weight_bound_in_other_guard"] = '''

class _Lambda(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        e1 = torch.exp(torch.dot(q1, k1))
        e2 = torch.exp(torch.dot(q2, k2))
        ctx.save_for_backward(q1, k1, q2, k2, e1, e2)
        return e1 - e2 + lambda_init

    @staticmethod
    def backward(ctx, grad):
        q1, k1, q2, k2, e1, e2 = ctx.saved_tensors
        need = ctx.needs_input_grad
        gq1 = gk1 = gq2 = gk2 = None
        if need[0] or need[1]:
            w1 = grad * e1
            if need[0]:
                gq1 = w1 * k1
            if need[1]:
                gk1 = w1 * q1
        if need[2]:
            w2 = -grad * e2
            gq2 = w2 * k2
        if need[3]:
            gk2 = w2 * q2
        return gq1, gk1, gq2, gk2, None


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    return _Lambda.apply(q1, k1, q2, k2, lambda_init)
'''

LAM_BAD["lam_pairwise_sum_drops_odd"] = '''

def _pairwise_sum(x):
    # tree reduction: fewer rounding steps than a running sum in float32
    while x.shape[0] > 1:
        half = x.shape[0] // 2
        x = x[:half] + x[half:2 * half]
    return x[0]


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    a = _pairwise_sum(q1 * k1)
    b = _pairwise_sum(q2 * k2)
    return torch.exp(a) - torch.exp(b) + lambda_init
'''

LAM_BAD["lam_frozen_vectors_flagged_trainable"] = '''

def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    # lambda must stay differentiable with respect to all four vectors
    vecs = [v if v.requires_grad else v.requires_grad_() for v in (q1, k1, q2, k2)]
    a = torch.dot(vecs[0], vecs[1])
    b = torch.dot(vecs[2], vecs[3])
    return torch.exp(a) - torch.exp(b) + lambda_init
'''

LAM_BAD["lam_vectors_positional_only"] = '''

def differential_lambda(q1, k1, q2, k2, /, lambda_init=0.2):
    check_lambda_inputs(q1, k1, q2, k2)
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init
'''

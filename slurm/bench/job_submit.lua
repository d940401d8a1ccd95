-- job_submit/lua doing what job_submit/dynmig does for the common case, for comparison
-- (slurm/bench/submit_cost.sh): read --mig-mem from spank_job_env, pick the smallest
-- A100-80GB MIG profile that fits, rewrite tres_per_node "gres:gpu:N" (23.11+: "gres/gpu:N")
-- to "gres:gpu:<profile>:N" (the same prefix), and note the decision in admin_comment.
-- Profile memory in MiB from crates/dynmig-core/src/geometry/models.rs (A100_80GB).
local profiles = {
	{ "1g.10gb", 9728 }, { "2g.20gb", 19968 }, { "3g.40gb", 40192 }, { "7g.80gb", 80896 },
}
local units = { K = 1 / 1024, M = 1, G = 1024, T = 1024 * 1024 }

local function mig_mem_mib(env)
	if env == nil then return nil end
	for _, entry in pairs(env) do
		local v = string.match(entry, "^_SLURM_SPANK_OPTION_dynmig_mig_mem=(.*)$")
		if v then
			local num, unit = string.match(v, "^([%d%.]+)([KMGT]?)[iB]*$")
			if not num then return -1 end
			return tonumber(num) * units[unit ~= "" and unit or "M"]
		end
	end
	return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local tres = job_desc.tres_per_node
	if tres == nil then return slurm.SUCCESS end
	-- Keep the release's prefix: 23.11+ refuses "gres:" ("Invalid Trackable RESource
	-- (TRES) specification") where it sends "gres/".
	local prefix, count = string.match(tres, "^(gres[:/])gpu:(%d+)$")
	if count == nil then return slurm.SUCCESS end
	local mib = mig_mem_mib(job_desc.spank_job_env)
	if mib == nil then mib = 9728 end
	if mib < 0 then
		slurm.log_user("dynmig: --mig-mem: not a size, e.g. --mig-mem=18G")
		return slurm.ESLURM_INVALID_GRES
	end
	for _, p in ipairs(profiles) do
		if p[2] >= mib then
			job_desc.tres_per_node = prefix .. "gpu:" .. p[1] .. ":" .. count
			job_desc.admin_comment = string.format(
				"dynmig: profile=%s count=%s mem=%.1fGiB source=mig-mem", p[1], count, mib / 1024)
			slurm.log_info("dynmig-lua: job %s uid %u: %s", tostring(job_desc.name), submit_uid,
				job_desc.admin_comment)
			return slurm.SUCCESS
		end
	end
	slurm.log_user("dynmig: --mig-mem is more than the largest MIG profile")
	return slurm.ESLURM_INVALID_GRES
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end
